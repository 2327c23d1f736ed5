"""The harness both implementation processes run, each its own copy: the reference's (trusted)
and the candidate's (not, once the candidate loads). Timed batches (batchrun), verification
calls, module loading, the in-process clock, the output hand-off and the message channel the
three processes share.

The judge trusts what the reference's copy computes and nothing the candidate's copy reports:
the same code, judged by where it runs.
"""
