"""``crkafka``: the project's command-line tool (``main``) and its sub-commands."""
