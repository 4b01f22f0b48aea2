"""One module per `agenttrace` subcommand. Each defines `register(subparsers)`, which adds its
parser and sets `func`; modules import their heavy dependencies inside `func`, so `agenttrace
report` never imports torch. To add a command, add a module here and list it in `COMMANDS`."""

COMMANDS = (
    "agenttrace.commands.demo",
    "agenttrace.commands.report",
    "agenttrace.commands.compare",
    "agenttrace.commands.bench",
    "agenttrace.commands.export",
    "agenttrace.commands.serve",
)
