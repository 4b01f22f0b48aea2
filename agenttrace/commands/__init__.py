"""One module per `agenttrace` subcommand. Each defines `register(subparsers)`, which adds its
parser and sets `func`; modules import their heavy dependencies inside `func`, so `agenttrace
report` never imports torch. To add a command, add a module here and name it in `COMMANDS`.

Commands can also come from outside the library: any installed distribution may list a
`register` function under the `agenttrace.commands` entry-point group (the reference demo does,
from `agents/demo_command.py`). `input_options.py` holds the input options report and compare share."""

# command name -> its module; the command line imports only the one it runs (all of them for --help)
COMMANDS = {
    "report": "agenttrace.commands.report",
    "compare": "agenttrace.commands.compare",
    "bench": "agenttrace.commands.bench",
    "export": "agenttrace.commands.export",
    "serve": "agenttrace.commands.serve",
    "train-drafter": "agenttrace.commands.train_drafter",
    "run": "agenttrace.commands.run",
}
ENTRY_POINT_GROUP = "agenttrace.commands"
