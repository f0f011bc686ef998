"""DESIGN §5: the long-lived pump polls the mailbox every ``busy_poll_s`` while
messages keep coming and every ``idle_poll_s`` once it has been quiet for ``busy_window_s``."""

from msgx_engine.pipeline.pump import PumpOptions, pause_s


def test_pause_is_short_while_messages_keep_coming_and_long_once_quiet():
    opts = PumpOptions()
    assert (opts.busy_poll_s, opts.idle_poll_s, opts.busy_window_s) == (0.02, 0.2, 2.0)
    assert pause_s(opts, 0.0) == pause_s(opts, 1.99) == 0.02
    assert pause_s(opts, 2.0) == pause_s(opts, 600.0) == 0.2
    custom = PumpOptions(idle_poll_s=1.0, busy_poll_s=0.05, busy_window_s=10.0)
    assert (pause_s(custom, 9.9), pause_s(custom, 10.0)) == (0.05, 1.0)
