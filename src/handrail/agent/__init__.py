"""create_agent and the Agent facade.

The facade is thin: it checks the arguments, builds an :class:`~handrail.runtime.effects.Env`
and hands the work to the runtime, driven synchronously or asynchronously. Its parts,
one concept a module:

- ``_building.py``: :func:`create_agent`;
- ``_facade.py``: :class:`Agent`, put together from the parts below;
- ``runs.py``: ``invoke``, ``stream``, ``run_claimed``;
- ``reviews.py``: answers recorded without running them (``decide``, ``expire``,
  ``withdraw``), grants, who may decide;
- ``_state.py``: a thread's state, history and hand-made updates; the inbox, the threads;
- ``maintenance.py``: pruning, the audit trail and its verification, deletion;
- ``core.py``: what they stand on: the spec, the config a call names, a run prepared;
- ``retry.py``: when a run is tried again (its rules at its top);
- ``_work.py``: how a method and its async twin share one implementation;
- ``_callers.py``: who is calling, from a reviewer value or a config.
"""

from handrail.agent._building import create_agent
from handrail.agent._facade import Agent
from handrail.runtime.inbox import InterruptPage, PendingInterrupt

__all__ = ["Agent", "InterruptPage", "PendingInterrupt", "create_agent"]
