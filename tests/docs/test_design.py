#!/usr/bin/env python3
"""docs/design.md against the tree it describes (no build, no database).

Four checks, each failing with what differs and where:
  folders   the source folders its table lists are the top-level folders
            that hold .c/.h files;
  includes  every `#include "folder/..."` of every C, C++ and CUDA file is
            one its "may include" table allows (another folder's internal
            header only where the row says "internal");
  events    the trainer's output events it lists are the trainer's: the
            TRN_EVENT(name, ...) lines of a header under trainer/ or
            common/, or, where there are none, the event literals the
            trainer writes (trainer/*.c);
  citations every comment or document that cites a design document cites
            docs/design.md with a #section that is one of its headings.

Usage: test_design.py [SOURCE_DIR]   (default: this checkout)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
DESIGN = "docs/design.md"
SELF = "tests/docs/test_design.py"
C_EXT = (".c", ".h", ".cu", ".cuh")
# the files whose text may cite a design document: code, build files, docs
TEXT_EXT = C_EXT + (".py", ".sh", ".sql", ".cmake", ".js", ".mjs", ".cjs", ".md", ".css",
                    ".html", ".txt")


def tree_files():
    """The checkout's files (tracked, and untracked ones git does not
    ignore), relative to ROOT; every file below ROOT where git cannot say."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
        return sorted(n for n in set(names) if os.path.isfile(os.path.join(ROOT, n)))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, subs, files in os.walk(ROOT):
            subs[:] = [s for s in subs if not s.startswith((".", "build")) and s != "node_modules"]
            found += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
        return sorted(found)


def slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def sections(text):
    """{anchor: the section's text up to the next heading}, for every
    heading of the document."""
    heads = [(m.start(), m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, re.M)]
    out = {}
    for i, (pos, title) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        out[slug(title)] = text[pos:end]
    return out


def table_rows(section):
    """The cells of each row of the section's Markdown tables, the header
    and the --- line left out."""
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or re.match(r"^\|[\s\-:|]+\|$", line):
            continue
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:] if rows else rows


def need_section(secs, anchor):
    if anchor not in secs:
        sys.exit(f"{DESIGN}: no section #{anchor} (its headings: {', '.join(sorted(secs))})")
    return secs[anchor]


def first_cells(secs, anchor, pattern):
    """The names the section's tables list in their first column, each cell
    a match of pattern (its group 1 the name)."""
    cells = (re.fullmatch(pattern, row[0]) for row in table_rows(need_section(secs, anchor)))
    return {m.group(1) for m in cells if m}


def check_folders(secs, files):
    listed = first_cells(secs, "source-folders", r"`([\w.-]+)/`")
    tree = {f.split("/")[0] for f in files if "/" in f and f.endswith(C_EXT)}
    errors = []
    for d in sorted(tree - listed):
        errors.append(f"{DESIGN}#source-folders: folder {d}/ holds C files but is not listed")
    for d in sorted(listed - tree):
        errors.append(f"{DESIGN}#source-folders: lists {d}/, which holds no C files in the tree")
    return errors, tree


def check_includes(secs, files, folders):
    allowed = {}
    for row in table_rows(need_section(secs, "what-each-folder-may-include")):
        m = re.fullmatch(r"`([\w.-]+)/`", row[0])
        if m and len(row) >= 2:
            allowed[m.group(1)] = (set(re.findall(r"`([\w.-]+)/`", row[1])),
                                   "internal" in row[1])
    errors = [f"{DESIGN}#what-each-folder-may-include: no row for {d}/"
              for d in sorted(folders - set(allowed))]
    inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
    for f in files:
        if not f.endswith(C_EXT) or "/" not in f:
            continue
        own = f.split("/")[0]
        if own not in allowed:
            continue
        may, internal_ok = allowed[own]
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = inc.match(line)
                if not m or "/" not in m.group(1):
                    continue
                target = m.group(1).split("/")[0]
                if target not in folders or target == own:
                    continue
                if target not in may:
                    errors.append(f"{f}:{n}: includes \"{m.group(1)}\", but {DESIGN}"
                                  f"#what-each-folder-may-include lets {own}/ include only "
                                  f"{', '.join(sorted(may)) or 'its own headers'}")
                elif os.path.basename(m.group(1)).startswith("internal.") and not internal_ok:
                    errors.append(f"{f}:{n}: includes {target}/'s private header "
                                  f"\"{m.group(1)}\"; {DESIGN}#what-each-folder-may-include "
                                  f"does not let {own}/ include another folder's internal headers")
    return errors


def tree_events(files):
    """The trainer's events and where each was found: the X-macro form
    where a header has it, else the literals the trainer prints."""
    found = {}
    xmacro = re.compile(r"^\s*TRN_EVENT\(\s*(\w+)\s*,", re.M)
    for f in files:
        if f.split("/")[0] in ("trainer", "common") and f.endswith(".h"):
            text = open(os.path.join(ROOT, f), encoding="utf-8", errors="replace").read()
            for m in xmacro.finditer(text):
                found.setdefault(m.group(1), f"{f}:{text.count(chr(10), 0, m.start()) + 1}")
    if found:
        return found
    literal = re.compile(r'\\"event\\":\\"(\w+)\\"|"event",\s*"(\w+)"')
    for f in files:
        if f.startswith("trainer/") and f.endswith(".c"):
            text = open(os.path.join(ROOT, f), encoding="utf-8", errors="replace").read()
            for m in literal.finditer(text):
                found.setdefault(m.group(1) or m.group(2),
                                 f"{f}:{text.count(chr(10), 0, m.start()) + 1}")
    return found


def check_events(secs, files):
    listed = first_cells(secs, "output-events", r"`(\w+)`")
    tree = tree_events(files)
    if not tree:
        return ["found no trainer events in the tree (no TRN_EVENT(name, ...) line under "
                "trainer/ or common/, no event literal in trainer/*.c)"]
    errors = [f"{tree[e]}: the trainer's event \"{e}\" is not in {DESIGN}#output-events"
              for e in sorted(set(tree) - listed)]
    errors += [f"{DESIGN}#output-events: lists the event \"{e}\", which the trainer does not "
               f"have (its events: {', '.join(sorted(tree))})" for e in sorted(listed - set(tree))]
    return errors


def check_citations(secs, files):
    errors = []
    upper = re.compile(r"DESIGN\.md")
    cite = re.compile(r"(?<![\w/.])((?:\.\./)?(?:docs/)?design\.md)(#[\w-]+)?")
    for f in files:
        if f in (DESIGN, SELF) or not f.endswith(TEXT_EXT):
            continue
        try:
            lines = open(os.path.join(ROOT, f), encoding="utf-8").read().splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(lines, 1):
            if upper.search(line):
                errors.append(f"{f}:{n}: cites DESIGN.md, which the repository does not "
                              f"hold: cite {DESIGN}#SECTION")
            for m in cite.finditer(line):
                where, anchor = m.group(1), m.group(2)
                target = os.path.normpath(os.path.join(os.path.dirname(f), where)) \
                    if f.endswith(".md") and not where.startswith("docs/") else where
                if target != DESIGN and where != DESIGN:
                    errors.append(f"{f}:{n}: cites {where}, which is not {DESIGN}")
                elif not anchor:
                    errors.append(f"{f}:{n}: cites {where} without a section (#anchor)")
                elif anchor[1:] not in secs:
                    errors.append(f"{f}:{n}: cites {where}{anchor}, but {DESIGN} has no "
                                  f"heading {anchor}")
    return errors


def main():
    path = os.path.join(ROOT, DESIGN)
    if not os.path.isfile(path):
        sys.exit(f"{path}: missing")
    secs = sections(open(path, encoding="utf-8").read())
    files = tree_files()
    errors, folders = check_folders(secs, files)
    errors += check_includes(secs, files, folders)
    errors += check_events(secs, files)
    errors += check_citations(secs, files)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"test_design: {len(errors)} problem(s): {DESIGN} and the tree disagree",
              file=sys.stderr)
        return 1
    print(f"test_design: {DESIGN} agrees with the tree ({len(folders)} source folders, "
          f"{len(tree_events(files))} trainer events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
