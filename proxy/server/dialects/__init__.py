"""The planned APIs as dialects of the pipeline: chat completions, the Responses API,
Anthropic's Messages API. Each says how its body is read and checked, turned into the
planner's neutral messages and written back, where it goes, how its stream is tapped and
its errors shaped; the pipeline does the rest, the same for all."""
