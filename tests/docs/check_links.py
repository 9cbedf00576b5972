"""Every relative link of README.md and docs/*.md resolves: the file (or folder) exists, and an
anchor (#...) names a heading of the target page as GitHub renders it (lower case, punctuation
but '-' and '_' dropped, spaces as '-', repeated headings numbered -1, -2, ...). Links inside code
blocks and inline code are not links. Prints each broken link as FILE:LINE: [label](target): why,
and exits 1 if there is any.
    /usr/bin/python3 tests/docs/check_links.py [ROOT]
"""
import os
import re
import sys

LINK = re.compile(r'(?<!!)\[([^\]]*)\]\(([^)\s]+)\)|!\[([^\]]*)\]\(([^)\s]+)\)')


def slugs(path):
    out, seen, block = set(), {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                block = not block
                continue
            m = None if block else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))  # a link's label only
            s = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def links(path):
    block = False
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if line.startswith("```"):
                block = not block
                continue
            if block:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # inline code holds no links
            for m in LINK.finditer(line):
                label = m.group(1) if m.group(1) is not None else m.group(3)
                yield no, label, m.group(2) or m.group(4)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    pages = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    for dirpath, _, files in os.walk(docs):
        pages += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".md")]
    cache, bad, count = {}, 0, 0
    for page in pages:
        for no, label, target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            count += 1
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            why = None
            if not os.path.exists(dest):
                why = "no such file %s" % os.path.relpath(dest, root)
            elif anchor and dest.endswith(".md"):
                if dest not in cache:
                    cache[dest] = slugs(dest)
                if anchor not in cache[dest]:
                    why = "no heading #%s in %s" % (anchor, os.path.relpath(dest, root))
            if why:
                bad += 1
                print("%s:%d: [%s](%s): %s" % (os.path.relpath(page, root), no, label, target, why))
    print("%d relative links in %d pages, %d broken" % (count, len(pages), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
