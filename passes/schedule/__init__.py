"""The space-time scheduler (``m100-schedule``): op graph, cost model, partitioning, placement search,
timeline, report and the emitter of placed ``tpb`` IR. See ``docs/schedule.md``."""
