#!/usr/bin/env python3
"""Generate golden.json for the shlex package tests.

The expectations come from CPython's own shlex module. They were generated
with Python 3.11; regenerate (from the repository root) with:

    python3 shlex/testdata/gen_golden.py > shlex/testdata/golden.json

The Go tests only read golden.json; python is not needed at test time.
"""
import json
import random
import shlex
import sys

SPLIT_CASES = [
    # empty / whitespace only
    "", " ", "   ", "\t", "\n", "\r\n", " \t\r\n ",
    # plain words and whitespace kinds
    "a", "sleep 5", "  sleep   5  ", "a\tb", "a\nb", "a\rb", "a\r\nb",
    "ls -la /tmp", "echo hello world",
    # characters that are NOT whitespace for shlex
    "a\vb", "a\fb", "a\x00b", "\x00", "a \x00 b", "a\u00a0b", "a\u2028b",
    "a\u3000b", "\u00a0", "a\x85b",
    # '#' is literal (comments=False)
    "#", "a#b", "a # b", "echo #not a comment", "#!/bin/sh",
    # single quotes
    "'a b'", "'a'", "''", "'' ''", "a ''", "'' a", "'a\\b'", "'a\\'",
    "'\"'", "'a\"b'", "'a\nb'", "'#'", "' '",
    # double quotes
    '"a b"', '""', '"" ""', '"\'"', '"a\'b"', '"a\nb"', '"\\""', '"\\\\"',
    '"\\a"', '"\\$HOME"', '"\\n"', '"a\\\\b"', '"a\\b"', '"\\\'"',
    '"\\\nx"', '"\\ "',
    # adjacent pieces join
    "'a'\"b\"c", "a'b'c", "a\"b\"c", "'a''b'", '"a""b"', "a''b", 'a""b',
    "a'' b", "''a", '""a', "x'y z'w", "--opt='a b'", '--opt="a b"',
    "a\"\"", "\"\"''\"\"",
    # backslash escapes outside quotes
    "\\a", "a\\ b", "\\ ", "\\\\", "\\'", '\\"', "a\\'b", "\\#", "\\\t",
    "a\\\nb", "\\\n", "a \\\n b", "\\\r\n", "\\x41", "\\\\\\\\", "\\é",
    # quotes inside words
    "it's", "don't stop", "say \"hi\"", "a'b c'd e", "a\"b c\"d e",
    # errors
    "'", '"', "'abc", '"abc', "a 'b", 'a "b', "'a'b'", '"a"b"',
    "\\", "a\\", "a \\", '"\\', "'\\'\\", '"a\\"', "'a\\'\\",
    "'\"", "\"'", "a 'b\nc", "\\\\\\",
    # unicode
    "héllo wörld", "日本語 テキスト", "'日本 語'", '"ünï cödé"', "emoji 😀 🎉",
    "a😀b", "\U0001F600", "ßàáâ ÀÁÂ", "e\u0301", "\u200b", "a\ufeffb",
    "\ufffd", "\U0010FFFF",
    # mixed
    "python3 -c 'import sys; print(sys.argv)' a b",
    "sh -c \"echo \\\"hi there\\\"; exit 1\"",
    "grep -E '^[a-z]+$' file.txt",
    "cmd --flag=\"value with spaces\" 'single quoted' plain\\ escaped",
    "find . -name '*.go' -exec grep -l \"foo\" {} \\;",
    "echo $HOME ${PATH} `id` $(whoami)",
    "a|b&&c;d>e<f", "FOO=bar env",
    "  leading and trailing  ",
    "x\"\\\\\"y", "'it'\\''s'", "\"it's\" 'a\"b'",
]

QUOTE_CASES = [
    "", "a", "abc", "a b", "it's", "'", "\"", "a\"b", "ABCxyz019",
    "_@%+=:,./-", "a*b", "$HOME", "a\nb", "é", "日本", "\x00", "#", "~",
    "!", "a;b", "''", "\\", " ", "a'b'c", "--opt=1", "/usr/bin/env",
    "a\tb", "😀",
]


def split_result(s):
    try:
        return {"in": s, "out": shlex.split(s)}
    except ValueError as e:
        return {"in": s, "err": str(e)}


def random_cases(n, seed):
    rng = random.Random(seed)
    alphabet = list("ab '\"\\ \t\n\r#x") + ["é", "\u00a0", "\x00", "😀"]
    out = []
    for _ in range(n):
        length = rng.randint(0, 12)
        out.append("".join(rng.choice(alphabet) for _ in range(length)))
    return out


def main():
    split_cases = list(dict.fromkeys(SPLIT_CASES))
    random_split = [c for c in dict.fromkeys(random_cases(600, 20240611))
                    if c not in split_cases]
    golden = {
        "python": sys.version.split()[0],
        "split": [split_result(s) for s in split_cases],
        "random_split": [split_result(s) for s in random_split],
        "quote": [{"in": s, "out": shlex.quote(s)} for s in QUOTE_CASES],
    }
    json.dump(golden, sys.stdout, indent=1, ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
