"""The built-in processors, one module each, registered in loghubd/plugins/builtin.py."""
