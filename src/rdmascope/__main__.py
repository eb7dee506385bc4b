"""Allow ``python -m rdmascope ...`` (same as the ``rdmascope`` command)."""

from rdmascope.cli import main

if __name__ == "__main__":
    main(prog_name="rdmascope")
