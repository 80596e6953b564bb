"""Client programs written the way OpenPipe ART's examples write theirs, with one change: `import art` reads
`import autorl as art` (and `art.local` / `art.rewards` / `art.utils` imports read `autorl.`). Each trains two
steps of the model it registers; `tests/test_art_programs.py` runs them on one shared backend. Alone:
`python tests/art_programs/guess_the_number.py` (a `LocalBackend()` under ./.autorl)."""
