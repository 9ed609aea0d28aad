"""What if: replay a pool's own history under another policy (docs/whatif.md).

``changes`` parses what an alternative changes, ``intents`` rebuilds each decided intent from its
events, ``engine`` replays the window (the baseline and each alternative through
``domain.process``), ``meter`` measures a run, ``text`` prints the report and ``plot`` draws it.
Read-only: nothing here writes to the log or publishes an intent.
"""
