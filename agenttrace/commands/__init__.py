"""One module per `agenttrace` subcommand. Each defines `register(subparsers)`, which adds its
parser and sets `func`; modules import their heavy dependencies inside `func`, so `agenttrace
report` never imports torch. To add a command, add a module here and list it in `COMMANDS`.

Commands can also come from outside the library: any installed distribution may list a
`register` function under the `agenttrace.commands` entry-point group (the reference demo does,
from `agents/demo_command.py`). `options.py` holds the input options report and compare share."""

COMMANDS = (
    "agenttrace.commands.report",
    "agenttrace.commands.compare",
    "agenttrace.commands.bench",
    "agenttrace.commands.export",
    "agenttrace.commands.serve",
    "agenttrace.commands.train_drafter",
    "agenttrace.commands.run",
)
ENTRY_POINT_GROUP = "agenttrace.commands"
