"""Process sets of hora.torch: subsets of the ranks that collectives can run over.

The registry of the sets registered through add_process_set lives here (_registered);
shutdown() (hora.torch.basics) unregisters them all.
"""
from hora.torch import _engine as E
from hora.torch import _state


# ---- process sets -------------------------------------------------------------------------------

_registered = {}  # id -> ProcessSet object registered through add_process_set


class ProcessSet:
    """A subset of the ranks that collectives can run over (process_set=...).

    Build it from a list of global ranks and register it on every rank with add_process_set (or
    init(process_sets=...)). Ranks are kept sorted; a rank's position in that order is its rank
    in the set. Operations on a set take global ranks where they name one (broadcast's
    root_rank).
    """

    def __init__(self, ranks):
        if isinstance(ranks, ProcessSet):
            ranks = ranks.ranks
        try:
            self.ranks = sorted(set(int(r) for r in ranks))
        except (TypeError, ValueError):
            raise TypeError("a ProcessSet is made from a list of ranks, not %r" % (ranks,)) \
                from None
        self.process_set_id = None

    def _info(self):
        eng = _state.engine
        if eng is None or self.process_set_id is None:
            return None
        return eng.sets().get(self.process_set_id)

    def size(self):
        """The number of ranks in the set; None while not registered."""
        info = self._info()
        return None if info is None else len(info.ranks)

    def rank(self):
        """This process's rank in the set; None while not registered or if not a member."""
        info = self._info()
        return None if info is None or info.index < 0 else info.index

    def included(self):
        """Whether this process is a member; None while not registered."""
        info = self._info()
        return None if info is None else info.index >= 0

    def _invalidate(self):
        self.process_set_id = None

    def __repr__(self):
        if self.process_set_id == 0:
            return "ProcessSet(process_set_id=0, ranks=all)"
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _set_id(process_set):
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a ProcessSet, not %s" % type(process_set).__name__)
    if process_set.process_set_id is None:
        raise ValueError("%r is not registered; call hvd.add_process_set() on every rank first"
                         % (process_set,))
    return process_set.process_set_id


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of global ranks); collective over all
    ranks, which must pass the same ranks in the same order of calls. Returns the ProcessSet."""
    eng = _state.eng()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    name = eng.make_name(0, "add_process_set", None)
    try:
        if ps.process_set_id is not None:
            raise ValueError("%r is already registered" % (ps,))
        if not ps.ranks:
            raise ValueError("a process set needs at least one rank")
        if ps.ranks[0] < 0 or ps.ranks[-1] >= eng.size:
            raise ValueError("process set ranks %s: ranks lie in [0, %d)" % (ps.ranks, eng.size))
    except ValueError as ex:
        eng.announce_error(E.ADD_SET, 0, name, str(ex))
        raise
    req = E.Request(E.ADD_SET, 0, name)
    req.shape = list(ps.ranks)
    eng.submit([req])
    ps.process_set_id = eng.wait(req)
    _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a process set; collective over all ranks. Returns True when it was
    registered and is now removed."""
    eng = _state.eng()
    if not isinstance(process_set, ProcessSet):
        raise TypeError("remove_process_set takes a ProcessSet")
    name = eng.make_name(0, "remove_process_set", None)
    set_id = process_set.process_set_id
    if set_id == 0:
        eng.announce_error(E.REMOVE_SET, 0, name, "the global process set cannot be removed")
        raise ValueError("the global process set cannot be removed")
    req = E.Request(E.REMOVE_SET, 0, name, extra=-1 if set_id is None else set_id)
    eng.submit([req])
    try:
        eng.wait(req)
    except ValueError:
        if set_id is None:
            return False
        raise
    _registered.pop(set_id, None)
    process_set.process_set_id = None
    return True
