import sys

from lengthgen.support import warm

# A local Snakemake run starts a warm-start server (lengthgen.support.warm); without one, run here.
code = warm.forward(sys.argv[1:])
if code is None:
    from lengthgen.cli import main

    code = main()
raise SystemExit(code)
