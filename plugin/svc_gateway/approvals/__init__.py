"""A person approves, not the model: pending purchases and their codes, spending mandates.

``money`` values a plan's credits; ``mandates`` parses ``/svc_allow`` and names the windows;
``ledger`` (in-process) and ``redis_ledger`` (``stateUrl``) keep mandates and what they spent
behind one protocol; ``pending`` keeps the codes; ``gate`` is what tools, queries and metered
calls consult; ``commands`` answers ``/svc_approve``, ``/svc_deny`` and ``/svc_allow``.
"""
