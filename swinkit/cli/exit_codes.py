"""The exit codes of every swinkit command: one place, so that the command modules need not
import each other for them (swinkit.cli, swinkit.cli.launch, swinkit.cli.engines)."""

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
