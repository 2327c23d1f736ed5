"""What runs in the reference process, which the judge trusts (no candidate code is ever
loaded there): the problem's own Model, the comparison of outputs, the eager and torch.compile
baselines timed by the judge's clock, the device's ceilings and the physical floor.
"""
