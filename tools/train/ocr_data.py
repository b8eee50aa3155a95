"""Synthetic OCR data: one rendered text line -> (image, exact text), and the Qwen3-VL image preprocessing.

The OCR model reads single lines: every image is LINE_H (32) px high after the model's own smart_resize (its
height is drawn in 24..44 px, which smart_resize rounds to 32), so the vision tower sees one row of merged 32x32
tokens and the decoder reads 1-4 characters per visual token, left to right.

Recipe (all randomness from one numpy Generator, so a seed fixes every sample):
  text    one line of printable ASCII (no leading/trailing/double spaces), 1..MAX_LINE (40) characters, drawn from:
          prose from data/words.txt (case styles, punctuation) 42%, title case 8%, numbers/dates/prices/times 17%,
          identifiers/emails/URLs/codes 12%, code-like snippets 10%, random printable characters 5%, labelled
          values ("Total: $12.40") 6%.
          Out-of-list lines (TextGen oov: the probability of one, train_ocr.py --oov; 0 in sessions 1-5): tokens
          of pronounceable pseudo-words not in words.txt 12%, listed words with 1-2 random letter edits (not in
          the list) 10%, random letter strings (lower/upper/capitalised/mixed) 10%, listed words 23%, identifiers of pseudo-words/letters (snake_case, camelCase, PascalCase, dotted,
          kebab-case, CONSTANT_CASE, with digits) 15%, numbers/dates/prices/times 17%, codes/emails/URLs/versions
          8%, punctuation runs 5% - 1..8 tokens with attached punctuation, quotes or brackets (70% of the lines) -, code lines made of them (some with single-letter variables) 15%, random printable characters 7%, labelled
          values 8%. Lines with crc32 % 16 == 0 are reserved for the out-of-list held-out set: training redraws
          them (TextGen reserve="train"), that set keeps only them (reserve="heldout").
  fonts   the 16 regular/bold/italic DejaVu Sans, Sans Mono, Serif and STIX General TTFs of matplotlib's mpl-data
          (same files on every machine with matplotlib), size 16..30 px.
  layout  ink height + top/bottom margins = 24..44 px, left/right margins 2..24 px, width >= 40 px.
  colours light, dark or coloured background (solid, gradient, noise texture or a few faint shapes), text colour
          with a luminance difference >= 90.
  damage  rotation +-1 degree (15%), Gaussian blur r 0.3..0.9 (20%), Gaussian noise sigma 2..10 (25%), down/up
          scaling 0.7..0.9 (10%), JPEG quality 40..90 (15%).
Preprocessing = Qwen2VLImageProcessorFast of transformers 5.17 with this model's preprocessor_config.json:
smart_resize (factor 32, MIN_PIXELS..MAX_PIXELS), torchvision bicubic antialiased resize on uint8, (x/255-0.5)/0.5,
patches of 3x2x16x16 in merge-block order (patchify; patchify_batch is the same on a padded or packed batch, on
the GPU).
"""

import io
import os
import string

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

HERE = os.path.dirname(os.path.abspath(__file__))
PATCH, MERGE, TPATCH = 16, 2, 2
LINE_H = 32                     # every image is one row of merged tokens after smart_resize
MIN_PIXELS = 32 * 32             # >= 1 visual token (a larger minimum would upscale short lines to 2 rows)
MAX_PIXELS = 32 * 32 * 64        # <= 64 visual tokens (a 32 x 2048 line)
MAX_LINE = 40
PROMPT = "Read all the text in the image."

FONT_NAMES = [
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSansMono-Oblique.ttf", "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
]


def font_paths():
    import matplotlib
    d = os.path.join(matplotlib.get_data_path(), "fonts", "ttf")
    paths = [os.path.join(d, n) for n in FONT_NAMES]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise SystemExit("missing fonts: %s" % missing)
    return paths


def load_words():
    with open(os.path.join(HERE, "data", "words.txt"), encoding="utf-8") as f:
        return [w.strip() for w in f if w.strip() and not w.startswith("#")]


PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " "
TLDS = ["com", "org", "net", "io", "dev", "edu", "de", "co.uk"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
LABELS = ["Total", "Price", "Date", "Time", "Room", "Floor", "Order", "Invoice", "Ref", "Phone", "Tel", "ID",
          "Name", "Code", "Page", "Item", "Qty", "Amount", "Due", "Gate", "Seat", "Flight", "Version", "Step"]
CODE = ["{a} = {b} + {n}", "def {a}({b}):", "return {a}[{n}]", "if ({a} < {b}) {{", "for {a} in range({n}):",
        "{a}.{b}({c})", "x[{n}] = {a} * {b};", "print(\"{a}\")", "#include <{a}.h>", "{a} != {b} && {c}",
        "let {a} = [{n}, {m}];", "{a}->{b} = NULL;", "import {a}", "{a}: int = {n}", "SELECT {a} FROM {b};",
        "{a}({b}, {c})", "while {a} > {n}:", "// {a} {b}", "$ {a} --{b}={n}", "<{a} {b}=\"{n}\">"]


def ri(rng, lo, hi=None):
    """Python int from rng.integers (printf-style formats reject numpy ints)."""
    return int(rng.integers(lo, hi))


# Out-of-list text (TextGen oov > 0): pronounceable pseudo-words from these pieces, random letter strings,
# identifiers made of them, numbers, code and punctuation, so that the decoder learns to copy characters rather
# than to snap to the nearest word of data/words.txt.
ONSETS = ["", "", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
          "bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "kn", "ph", "pl", "pr", "qu", "sc", "sh", "sk",
          "sl", "sm", "sn", "sp", "st", "str", "sw", "th", "tr", "tw", "wh", "x"]
VOWELS = ["a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "ie", "oa", "oo", "ou", "au", "ei", "oi", "ue"]
CODAS = ["", "", "", "b", "ck", "d", "f", "g", "k", "l", "ld", "lt", "m", "mp", "n", "nd", "ng", "nk", "nt", "p",
         "r", "rd", "rk", "rm", "rn", "rt", "s", "sh", "sk", "ss", "st", "t", "th", "x", "z"]
OOV_CODE = ["{a} = {b}({c}) * {n}.{m}", "{a} = {b} * {c} + {n}", "{A}.{b}({c}, {n})", "{a}[{b}] += {n}",
            "if {a} is not None:", "{a} := {b}({c})", "{a}::{b}<{A}>", "{a} <= {n} || {b} >= {m}", "~/{a}/{b}.{e}",
            "{a}.{e}:{n}", "@{a}", "#{a}", "{A}_{B}={n}", "{a}?.{b} ?? {c}", "({a}, {b}) => {c}", "{a}++;",
            "{A}<{B}> {a};", "`{a} {b}`", "{a} & 0x{h}", "-{a} {b}",
            # single-letter variables (x, y, z: random letters; o: an operator)
            "{x} = {y} {o} {z}", "{a}({x}, {y})", "return {x} {o} {y}", "{x}[{n}] {o}= {y}", "{x} {o} {y} {o} {z}",
            "{a}({x}): {x} {o} {n}", "({x} {o} {y}) {o} {z}", "if {x} < {y}: {x} = {y}"]
OPS = ["+", "-", "*", "/", "%", "**", "&", "|", "^", "<<", ">>"]
EXTS = ["c", "h", "py", "js", "rs", "go", "md", "txt", "json", "toml", "sh", "cpp", "png", "csv"]
OOV_MOD = 16  # crc32(line) % OOV_MOD == 0: reserved for the out-of-list held-out set (never in training)


def reserved(line):
    """True for the lines kept for the out-of-list held-out set (a hash rule: training redraws them)."""
    import zlib
    return zlib.crc32(line.encode()) % OOV_MOD == 0


class TextGen:
    """Lines of text. oov = probability of an out-of-list line (line_oov) instead of the word-list recipe
    (line_raw); reserve: None (no rule), "train" (never a reserved() line) or "heldout" (only reserved() lines)."""

    def __init__(self, rng, words, oov=0.0, reserve=None):
        self.rng = rng
        self.words = words
        self.known = set(w.lower() for w in words)
        self.oov, self.reserve = oov, reserve
        # Zipf-like weights: frequent words more often, but the whole list appears.
        w = 1.0 / (np.arange(len(words)) + 10.0) ** 0.8
        self.p = w / w.sum()

    def word(self):
        return self.words[self.rng.choice(len(self.words), p=self.p)]

    def ident(self):
        r = self.rng
        k = ri(r, 0, 4)
        w = self.word()
        if k == 0:
            return w
        if k == 1:
            return w + "_" + self.word()
        if k == 2:
            return w + self.word().capitalize()
        return w[: ri(r, 1, 4)] + str(ri(r, 0, 100))

    def number(self):
        r = self.rng
        k = ri(r, 0, 10)
        if k == 0:
            return str(ri(r, 0, 10 ** ri(r, 1, 8)))
        if k == 1:
            return "%.*f" % (ri(r, 1, 4), r.random() * 10 ** ri(r, 1, 5))
        if k == 2:
            return "{:,}".format(int(ri(r, 1000, 10 ** 8)))
        if k == 3:
            return "$%d.%02d" % (ri(r, 0, 10000), ri(r, 0, 100))
        if k == 4:
            return "%d-%02d-%02d" % (ri(r, 1950, 2060), ri(r, 1, 13), ri(r, 1, 29))
        if k == 5:
            return "%02d/%02d/%d" % (ri(r, 1, 29), ri(r, 1, 13), ri(r, 1950, 2060))
        if k == 6:
            return "%d:%02d" % (ri(r, 0, 24), ri(r, 0, 60)) + ("" if r.random() < 0.6 else
                                                                        " " + ["AM", "PM", "am", "pm"][ri(r, 4)])
        if k == 7:
            return "%d%%" % ri(r, 0, 101) if r.random() < 0.5 else "%.1f%%" % (r.random() * 100)
        if k == 8:
            return "+%d %03d-%04d" % (ri(r, 1, 99), ri(r, 0, 1000), ri(r, 0, 10000))
        return "%s %d, %d" % (MONTHS[ri(r, 12)], ri(r, 1, 29), ri(r, 1950, 2060))

    def code_token(self):
        r = self.rng
        k = ri(r, 0, 6)
        if k == 0:
            return "".join(r.choice(list(string.ascii_uppercase + string.digits), ri(r, 3, 10)))
        if k == 1:
            return "%s-%d-%s" % ("".join(r.choice(list(string.ascii_uppercase), 2)), ri(r, 0, 10000),
                                 "".join(r.choice(list(string.ascii_uppercase + string.digits), 2)))
        if k == 2:
            return "0x" + "".join(r.choice(list("0123456789abcdefABCDEF"), ri(r, 2, 9)))
        if k == 3:
            return "%s.%s@%s.%s" % (self.word(), self.word(), self.word(), TLDS[ri(r, len(TLDS))])
        if k == 4:
            return "%swww.%s.%s/%s" % (["", "http://", "https://"][ri(r, 3)], self.word(),
                                       TLDS[ri(r, len(TLDS))], self.ident())
        return "v%d.%d.%d" % (ri(r, 0, 20), ri(r, 0, 30), ri(r, 0, 100))

    def prose(self, n_words, style):
        ws = [self.word() for _ in range(n_words)]
        r = self.rng
        if style == "title":
            ws = [w.capitalize() for w in ws]
        elif style == "upper":
            ws = [w.upper() for w in ws]
        elif style == "sentence":
            ws[0] = ws[0].capitalize()
        for i in range(len(ws) - 1):
            if r.random() < 0.07:
                ws[i] += [",", ";", ":", " -"][ri(r, 4)]
        if r.random() < 0.08:
            i = ri(r, len(ws))
            ws[i] = ["(%s)", "\"%s\"", "'%s'", "[%s]"][ri(r, 4)] % ws[i]
        if r.random() < 0.12:
            ws.insert(ri(r, len(ws) + 1), self.number())
        s = " ".join(ws)
        if style != "title" and r.random() < 0.6:
            s += [".", ".", ".", "!", "?", ":", "...", ";"][ri(r, 8)]
        return s

    def line_raw(self):
        r = self.rng
        u = r.random()
        if u < 0.42:
            return self.prose(int(ri(r, 1, 9)), ["lower", "sentence", "sentence", "upper"][ri(r, 4)])
        if u < 0.50:
            return self.prose(int(ri(r, 1, 6)), "title")
        if u < 0.67:
            return " ".join(self.number() for _ in range(ri(r, 1, 4)))
        if u < 0.79:
            return " ".join(self.code_token() for _ in range(ri(r, 1, 3)))
        if u < 0.89:
            t = CODE[ri(r, len(CODE))]
            return t.format(a=self.ident(), b=self.ident(), c=self.ident(), n=ri(r, 0, 1000),
                            m=ri(r, 0, 100))
        if u < 0.94:
            return "".join(r.choice(list(PRINTABLE), ri(r, 1, 25)))
        return "%s: %s" % (LABELS[ri(r, len(LABELS))], [self.number, self.code_token, self.word][ri(r, 3)]())

    # ---- out-of-list text ----------------------------------------------------------------------------------------

    def pseudo(self):
        """A pronounceable word of 1-4 syllables that is not in the word list."""
        r = self.rng
        for _ in range(20):
            w = "".join(ONSETS[ri(r, len(ONSETS))] + VOWELS[ri(r, len(VOWELS))] + CODAS[ri(r, len(CODAS))]
                        for _ in range(ri(r, 1, 5) if r.random() < 0.5 else ri(r, 1, 3)))
            if 1 <= len(w) <= 14 and w not in self.known:
                return w
        return w + "x"

    def letters(self):
        """Random letters: lower, upper, capitalised or mixed case, 1..12 of them."""
        r = self.rng
        k = ri(r, 4)
        pool = [string.ascii_lowercase, string.ascii_uppercase, string.ascii_lowercase, string.ascii_letters][k]
        w = "".join(r.choice(list(pool), ri(r, 1, 13) if r.random() < 0.6 else ri(r, 1, 5)))
        return w.capitalize() if k == 2 else w

    def cased(self, w):
        r = self.rng
        u = r.random()
        return w.capitalize() if u < 0.3 else w.upper() if u < 0.45 else w

    def near(self):
        """A listed word with 1-2 random letter edits (substitute, insert, delete, swap) that is not in the list:
        the text that a reader snapping to known words gets wrong ("omni" for "omit", "Paid" for "pad")."""
        r = self.rng
        for _ in range(20):
            w = list(self.word())
            for _ in range(ri(r, 1, 3)):
                i, c, k = ri(r, len(w)), string.ascii_lowercase[ri(r, 26)], ri(r, 4)
                if k == 0:
                    w[i] = c
                elif k == 1:
                    w.insert(ri(r, len(w) + 1), c)
                elif k == 2 and len(w) > 2:
                    del w[i]
                elif len(w) > 1:
                    j = min(i, len(w) - 2)
                    w[j], w[j + 1] = w[j + 1], w[j]
            s = "".join(w)
            if s not in self.known:
                return s
        return s

    def oov_word(self):
        """A short word outside the list (pseudo-word, edited listed word or random letters), sometimes a listed
        word."""
        r = self.rng
        u = r.random()
        if u < 0.3:
            return self.cased(self.pseudo())
        if u < 0.55:
            return self.cased(self.near())
        if u < 0.8:
            return self.letters()
        return self.cased(self.word())

    def oov_ident(self):
        """snake_case, camelCase, PascalCase, dotted, kebab-case or with digits, from out-of-list parts."""
        r = self.rng
        parts = [self.pseudo() if r.random() < 0.6 else self.letters().lower() for _ in range(ri(r, 1, 4))]
        k = ri(r, 7)
        if k == 0:
            s = "_".join(parts)
        elif k == 1:
            s = parts[0] + "".join(p.capitalize() for p in parts[1:])
        elif k == 2:
            s = "".join(p.capitalize() for p in parts)
        elif k == 3:
            s = ".".join(parts)
        elif k == 4:
            s = "-".join(parts)
        elif k == 5:
            s = "_".join(p.upper() for p in parts)
        else:
            s = parts[0] + str(ri(r, 0, 1000))
        return ("_" + s) if r.random() < 0.05 else s

    def oov_code(self):
        r = self.rng
        t = OOV_CODE[ri(r, len(OOV_CODE))] if r.random() < 0.6 else CODE[ri(r, len(CODE))]
        x, y, z = (string.ascii_letters[ri(r, 52 if r.random() < 0.2 else 26)] for _ in range(3))
        return t.format(a=self.oov_ident(), b=self.oov_ident(), c=self.oov_ident(), n=ri(r, 0, 1000),
                        m=ri(r, 0, 100), A=self.pseudo().capitalize(), B=self.letters().upper(),
                        e=EXTS[ri(r, len(EXTS))], h="%x" % ri(r, 0, 65536), x=x, y=y, z=z, o=OPS[ri(r, len(OPS))])

    def oov_punct(self):
        r = self.rng
        return "".join(r.choice(list(string.punctuation), ri(r, 1, 4)))

    def oov_token(self):
        r = self.rng
        u = r.random()
        if u < 0.40:
            return self.oov_word()
        if u < 0.55:
            return self.oov_ident()
        if u < 0.72:
            return self.number()
        if u < 0.80:
            return self.code_token()
        if u < 0.85:
            return self.oov_punct()
        return self.word()

    def line_oov(self):
        """A line outside the word list: tokens (words outside the list, identifiers, numbers, punctuation) joined
        by spaces with attached punctuation, a code line, a labelled value or random printable characters."""
        r = self.rng
        u = r.random()
        if u < 0.15:
            return self.oov_code()
        if u < 0.22:
            return "".join(r.choice(list(PRINTABLE), ri(r, 1, 30)))
        if u < 0.30:
            lab = self.cased(self.pseudo()) if r.random() < 0.5 else LABELS[ri(r, len(LABELS))]
            return "%s: %s" % (lab, " ".join(self.oov_token() for _ in range(ri(r, 1, 4))))
        ws = [self.oov_token() for _ in range(ri(r, 1, 9))]
        for i in range(len(ws) - 1):
            if r.random() < 0.12:
                ws[i] += [",", ";", ":", " -", ".", "!"][ri(r, 6)]
        if r.random() < 0.1:
            i = ri(r, len(ws))
            ws[i] = ["(%s)", "\"%s\"", "'%s'", "[%s]", "<%s>", "{%s}"][ri(r, 6)] % ws[i]
        s = " ".join(ws)
        if r.random() < 0.4:
            s += [".", "!", "?", ":", "...", ";", ","][ri(r, 7)]
        return s

    def line(self, max_chars=MAX_LINE):
        """One line of 1..max_chars characters, single spaces, no leading/trailing space (reserve: see above)."""
        for _ in range(1000):
            s = self._line(max_chars)
            if self.reserve is None or reserved(s) == (self.reserve == "heldout"):
                return s
        raise RuntimeError("no line for reserve=%r" % self.reserve)

    def _line(self, max_chars):
        for _ in range(20):
            s = " ".join((self.line_oov() if self.oov and self.rng.random() < self.oov else self.line_raw()).split())
            if 1 <= len(s) <= max_chars:
                return s
            if len(s) > max_chars:
                cut = s[:max_chars]
                if " " in cut[1:] and self.rng.random() < 0.8:
                    cut = cut[: cut.rindex(" ")]
                cut = cut.strip()
                if cut:
                    return cut
        return "".join(self.rng.choice(list(string.ascii_letters), 5))


def luminance(c):
    return 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]


def colours(rng):
    """(background, text) RGB tuples with a clear luminance difference."""
    for _ in range(50):
        k = rng.random()
        if k < 0.55:
            bg = tuple(int(v) for v in rng.integers(200, 256, 3))
        elif k < 0.75:
            bg = tuple(int(v) for v in rng.integers(0, 70, 3))
        else:
            bg = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            fg = (0, 0, 0) if luminance(bg) > 128 else (255, 255, 255)
            fg = tuple(int(np.clip(v + rng.integers(-30, 31), 0, 255)) for v in fg)
        else:
            fg = tuple(int(v) for v in rng.integers(0, 256, 3))
        if abs(luminance(bg) - luminance(fg)) >= 90:
            return bg, fg
    return (255, 255, 255), (0, 0, 0)


def background(rng, w, h, bg):
    k = rng.random()
    base = np.empty((h, w, 3), np.float32)
    base[:] = bg
    if k < 0.6:
        pass
    elif k < 0.8:  # linear gradient
        d = rng.uniform(-40, 40, 3)
        if rng.random() < 0.5:
            t = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
        else:
            t = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        base = base + t * d[None, None, :]
    elif k < 0.9:  # low-frequency texture
        sm = rng.normal(0, 1, (max(2, h // 16), max(2, w // 16), 3)).astype(np.float32)
        img = Image.fromarray(np.clip(128 + 40 * sm, 0, 255).astype(np.uint8)).resize((w, h), Image.BILINEAR)
        base = base + (np.asarray(img, np.float32) - 128) * rng.uniform(0.1, 0.4)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    if k >= 0.9:  # a few faint shapes
        dr = ImageDraw.Draw(img)
        for _ in range(rng.integers(1, 5)):
            c = tuple(int(np.clip(v + rng.integers(-35, 36), 0, 255)) for v in bg)
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            x1, y1 = x0 + int(rng.integers(5, w // 2 + 6)), y0 + int(rng.integers(2, h // 2 + 3))
            if rng.random() < 0.5:
                dr.rectangle([x0, y0, x1, y1], outline=c, width=int(rng.integers(1, 3)))
            else:
                dr.line([x0, y0, x1, y1], fill=c, width=int(rng.integers(1, 3)))
    return img


INK_PROBE = "ÅHdgjpqy|[]()$@"  # the tallest and deepest glyphs: a line's ink box whatever its text


class Fonts:
    """The training fonts, each (font, size) loaded once with its ink box (loading a face costs ~1 ms)."""

    def __init__(self, paths=None):
        self.paths = paths or font_paths()
        self.cache = {}

    def __len__(self):
        return len(self.paths)

    def get(self, i, size):
        """-> (ImageFont, (ink top, ink bottom) relative to the drawing origin)."""
        k = (i, size)
        if k not in self.cache:
            f = ImageFont.truetype(self.paths[i], size)
            _, top, _, bottom = f.getbbox(INK_PROBE)
            self.cache[k] = (f, (top, bottom))
        return self.cache[k]


def render_line(rng, text, fonts, fi, size):
    """One line of text in font fi on a canvas 24..44 px high (smart_resize makes it 32); -> (RGB image, bg)."""
    font, (top, bottom) = fonts.get(fi, size)
    ink = bottom - top
    lo = max(0, 24 - ink)
    m = int(rng.integers(lo, max(lo, min(44 - ink, 12)) + 1))  # top + bottom margin
    mt = int(rng.integers(0, m + 1))
    tw = int(np.ceil(font.getlength(text)))
    ml, mr = (int(v) for v in rng.integers(2, 25, 2))
    w = tw + ml + mr
    if w < 40:  # very short lines: centred on a 40 px canvas
        w, ml = 40, (40 - tw) // 2
    bg, fg = colours(rng)
    img = background(rng, w, ink + m, bg)
    ImageDraw.Draw(img).text((ml, mt - top), text, font=font, fill=fg)
    return img, bg


def damage(rng, img, bg):
    if rng.random() < 0.15:
        img = img.rotate(rng.uniform(-1, 1), resample=Image.BILINEAR, expand=False, fillcolor=bg)
    if rng.random() < 0.10:
        s = rng.uniform(0.7, 0.9)
        w, h = img.size
        img = img.resize((max(8, int(w * s)), max(8, int(h * s))), Image.BILINEAR).resize((w, h), Image.BICUBIC)
    if rng.random() < 0.20:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.9)))
    if rng.random() < 0.25:
        a = np.asarray(img, np.float32) + rng.standard_normal((img.size[1], img.size[0], 1), dtype=np.float32) * \
            rng.uniform(2, 10)
        img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    if rng.random() < 0.15:
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=int(rng.integers(40, 91)))
        buf.seek(0)
        img = Image.open(buf).convert("RGB")
    return img


SMALL_SIZES = (16, 22)  # the sizes the models read worst (after smart_resize: the most characters per token)


def make_sample(rng, gen, fonts, max_chars=MAX_LINE, clean=False, small=0.0, font_p=None):
    """-> (PIL RGB image of one line, its text, meta dict); fonts: a Fonts.
    Training emphasis (the held-out sets use the defaults): small = probability that the size is drawn from
    SMALL_SIZES instead of 16..30; font_p = the probability of each font (None: uniform)."""
    text = gen.line(max_chars)
    fi = int(rng.integers(len(fonts))) if font_p is None else int(rng.choice(len(fonts), p=font_p))
    size = int(rng.integers(*SMALL_SIZES)) if small and rng.random() < small else int(rng.integers(16, 31))
    img, bg = render_line(rng, text, fonts, fi, size)
    if not clean:
        img = damage(rng, img, bg)
    return img, text, {"font": FONT_NAMES[fi], "size": size}


# ---- preprocessing (Qwen2VLImageProcessorFast, transformers 5.17) ------------------------------------------------

def target_size(h, w):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
    return smart_resize(h, w, factor=PATCH * MERGE, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def resize(img):
    """PIL image -> uint8 tensor [3, h, w] at the smart_resize size (bicubic, antialiased, as the processor)."""
    import torch
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as TF
    img = img.convert("RGB")
    w0, h0 = img.size
    h, w = target_size(h0, w0)
    x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).contiguous()  # [3, h0, w0] uint8
    if (h, w) != (h0, w0):
        x = TF.resize(x, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)
    return x


def preprocess(img):
    """PIL RGB image -> (pixel_values float32 [N, 3*2*16*16], (1, gh, gw), resized uint8 [h, w, 3])."""
    x = resize(img)
    pv, g = patchify(x)
    return pv, g, x.permute(1, 2, 0).numpy()


def patchify(x):
    """uint8 [3, h, w] (h, w multiples of 32) -> (pixel_values float32 [N, 1536], (1, gh, gw))."""
    import torch
    if isinstance(x, np.ndarray):  # [h, w, 3]
        x = torch.from_numpy(np.ascontiguousarray(x)).permute(2, 0, 1)
    pv = patchify_batch(x[None], torch.tensor([x.shape[2]]))
    return pv, (1, x.shape[1] // PATCH, x.shape[2] // PATCH)


def patchify_batch(x, widths=None):
    """uint8 [B, 3, h, Wmax] (right-padded; h, Wmax multiples of 32), widths [B] (multiples of 32, on x's device;
    None: all Wmax) -> pixel_values float32 [patches, 1536]: image b is x[b, :, :, :widths[b]] as 2 equal frames,
    normalised ((x/255 - 0.5)/0.5 as the fast processor fuses it), cut in 2x16x16 patches in merge-block order
    [row block, column block, i, j] x [channel, frame, y, x]; the images follow each other."""
    import torch
    B, _, h, W = x.shape
    R, C = h // (PATCH * MERGE), W // (PATCH * MERGE)
    f = (x.float() - 127.5) / 127.5
    f = f.reshape(B, 1, 3, R, MERGE, PATCH, C, MERGE, PATCH).expand(B, TPATCH, 3, R, MERGE, PATCH, C, MERGE, PATCH)
    f = f.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # [B, R, C, i, j, ch, tp, py, px]
    f = f.reshape(B, R, C, MERGE * MERGE, 3 * TPATCH * PATCH * PATCH)
    if widths is None:
        return f.reshape(-1, 3 * TPATCH * PATCH * PATCH)
    keep = torch.arange(C, device=x.device)[None, :] < (widths // (PATCH * MERGE))[:, None]  # [B, C]
    return f[keep[:, None, :].expand(B, R, C)].reshape(-1, 3 * TPATCH * PATCH * PATCH)


def preprocessor_config():
    """preprocessor_config.json of the OCR model (Qwen3-VL layout, this model's pixel budget)."""
    return {
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Qwen2VLImageProcessorFast", "merge_size": MERGE, "patch_size": PATCH,
        "processor_class": "Qwen3VLProcessor", "resample": 3, "rescale_factor": 1 / 255,
        "size": {"longest_edge": MAX_PIXELS, "shortest_edge": MIN_PIXELS}, "temporal_patch_size": TPATCH,
    }
