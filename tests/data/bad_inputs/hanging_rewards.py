"""Reward functions that never return, each a way of waiting (tests/test_preflight.py: the preflight's time limit)."""

import signal
import socket
import time


def sleeps(completions, **kwargs):
    time.sleep(3600)


def waits_for_a_judge(completions, **kwargs):
    """A service that never answers: a socket read with no timeout."""
    mine, judge = socket.socketpair()
    mine.recv(1)


def deaf(completions, **kwargs):
    """Ignores the interrupt (as C code that never returns to Python would)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def times_itself(completions, **kwargs):
    """Bounds its own work with `signal.alarm`, which works in the main thread only (as TRL calls it)."""
    previous = signal.signal(signal.SIGALRM, lambda *args: None)
    signal.alarm(30)
    try:
        return [float(len(c)) for c in completions]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
