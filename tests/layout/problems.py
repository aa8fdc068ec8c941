"""How the layout checks end: print each problem, then a count (exit
status 1), or the line saying all is well (exit status 0)."""


def finish(problems, ok_line, counted="problem(s)"):
    """Prints `problems` one a line and "<n> <counted>", returning 1, or
    `ok_line` when there are none, returning 0."""
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} {counted}")
        return 1
    print(ok_line)
    return 0
