"""``python -m gcurun`` is the same command as ``gcurun``."""

from gcurun.cli.main import main

if __name__ == "__main__":
    main()
