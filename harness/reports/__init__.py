"""The reports wing: everything a run leaves on disk, and the tools that read it back.

- results:     results.csv, the one writer (appends per case) and the one reader (typed columns).
- tables:      the table model of a run (case summaries, failure sections, tables), computed once.
- markdown:    summary.md, the table model as Markdown.
- html:        report.html, the table model as one self-contained page with plots.
- junit:       junit.xml for CI systems.
- baseline:    diff_runs / BaselineDiff between two runs, and the committed per-platform baselines.
- fingerprint: fingerprint.json, the environment a run came from.
"""
