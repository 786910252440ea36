"""The local runner's process entry point: ``python -m rota.backends.runner SOCKET``.

The runner itself lives in ``rota.backends.local.runner``; this name is the one its
process carries (runners started before an upgrade, tools that find it by its argv).
"""

import sys

if __name__ == "__main__":
    from rota.backends.local.runner import main

    sys.exit(main(sys.argv))
