"""The `--help` formatter of every command: each option shows its default, unless it has none
(None, "", [], a flag that is off) or its help already says it."""

from __future__ import annotations

import argparse


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            action.default is None
            or action.default is False
            or action.default in ("", [])
            or action.default is argparse.SUPPRESS
            or "default" in text
        ):
            return text
        return super()._get_help_string(action)
