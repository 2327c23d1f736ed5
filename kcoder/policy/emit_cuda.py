TUNE = {}; CONFIG = {}
def render_cuda(plan): raise NotImplementedError
