"""The old lean planning path for plain chat, frozen: the reference the planner is held to.

Copied from proxy/planner/plain_{chat,order,plan}.py and the lean branch of
proxy/planner/request.py as they were at commit 70383c6, before the planner became one
path. Used only by tests/planner/test_plain_plan.py: the live planner must forward the
same bodies, with the same counts, problems and report, wherever this path planned.
"""
