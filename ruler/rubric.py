"""The default grading rubric RULER gives the judge."""

DEFAULT_RUBRIC = """\
- Goal achievement dominates: a trajectory that accomplishes the user's goal scores clearly higher than any \
trajectory that does not, however polished the latter is.
- Among trajectories that reach the goal, the more efficient one scores higher: fewer needless steps, tool calls, \
repetitions and words.
- Give partial credit: real progress toward the goal scores above no progress, and a small mistake costs less than \
a large one.
- Penalize fabricated facts or tool results, ignored instructions, false claims of success, and unsafe actions.
- Make score gaps proportional to quality gaps: equally good trajectories get equal scores, a clearly better one a \
clearly higher score. Use the range from 0 to 1 when the trajectories differ."""
