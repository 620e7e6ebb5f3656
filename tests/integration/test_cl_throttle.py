"""CL.THROTTLE replies exactly as redis-cell does (SPECS.md §5), on the test clock."""
from conftest import RespError


def test_readme_example(server):
    c = server.resp()
    assert c.command("CL.THROTTLE", "user123", 15, 30, 60) == [0, 16, 15, -1, 2]


def test_redis_cell_vector(server):
    """max_burst=4 (limit 5) at 1/s, every case at `start` unless stated."""
    c = server.resp()
    server.clock_set(1_700_000_000_000)
    k = "vector"
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 6) == [1, 5, 5, -1, 0]       # case 0: never fits
    for i in range(1, 6):                                                       # cases 1..5
        assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [0, 5, 5 - i, -1, i]
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [1, 5, 0, 1, 5]          # case 6
    server.clock_advance(3000)
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [0, 5, 2, -1, 3]         # case 7 (+3 s)
    # The digest elides cases 8..11; one request at +9.5 s leaves the state case 12 sees.
    server.clock_advance(6500)
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 1) == [0, 5, 4, -1, 1]
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 0) == [0, 5, 4, -1, 1]         # case 12: peek
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 2) == [0, 5, 2, -1, 3]         # case 13: spends 2
    assert c.command("CL.THROTTLE", k, 4, 1, 1, 5) == [1, 5, 2, 3, 3]          # case 14


def test_rounding(server):
    """Whole seconds, +1 only when at least 1 ms is left over."""
    c = server.resp()
    # T = 2001/2000 s = 1.0005 s: 0.5 ms over a second is not rounded up
    assert c.command("CL.THROTTLE", "r1", 0, 2000, 2001) == [0, 1, 0, -1, 1]
    assert c.command("CL.THROTTLE", "r1", 0, 2000, 2001) == [1, 1, 0, 1, 1]
    # T = 1/3 s: 333 ms is rounded up to 1 s
    assert c.command("CL.THROTTLE", "r2", 0, 3, 1) == [0, 1, 0, -1, 1]
    server.clock_advance(1)
    assert c.command("CL.THROTTLE", "r2", 0, 3, 1)[3] == 1


def test_errors(server):
    c = server.resp()
    assert c.command("CL.THROTTLE", "k", 1, 0, 60) == RespError("ERR Zero rates are not supported")
    assert isinstance(c.command("CL.THROTTLE", "k", 1, 0, 60), RespError)
    assert isinstance(c.command("CL.THROTTLE", "k", 1, 1), RespError)
    assert isinstance(c.command("CL.THROTTLE", "k", "x", 1, 60), RespError)
    assert c.command("PING") == "PONG"
