"""The old lean planning path for plain chat, frozen: the reference the planner is held to.

Copied from proxy/planner/plain_{chat,order,plan}.py and the lean branch of
proxy/planner/request.py as they were at commit 70383c6, before the planner became one
path, with the rules the contract gained since: the setup (every message before the first
answer) is kept whole, the goal section's (a request whose setup is over half the budget,
or a text agent, is left to the general path). Used only by
tests/planner/test_plain_plan.py: the live planner must forward the same bodies, with the
same counts, problems and report, wherever this path planned.
"""
