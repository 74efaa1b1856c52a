"""``python -m webhook.cli``: the ``segment-webhook`` command line."""

import sys

from webhook.cli import main

sys.exit(main())
