"""The running engine of hora.torch, between init() and shutdown() (hora.torch.basics).

basics sets it; every other module reads it from here (_state.engine, _state.eng()), never
through a copy of its own. It lives apart from basics so that the modules basics imports
(process_sets) can read it without importing basics back.
"""

engine = None  # the running Engine, between init() and shutdown()


def not_initialized():
    return ValueError("hora.torch has not been initialized; use hvd.init().")


def eng():
    """The running engine; ValueError when hora.torch is not initialized."""
    e = engine
    if e is None:
        raise not_initialized()
    return e
