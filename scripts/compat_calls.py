"""One real call per package for scripts/compat_table.py.

Each function imports its package, makes one small deterministic call and
returns plain data (str, int, float, tuples, lists), so that the result in a
worker can be compared with the result in the parent.  Importable by reference:
the table runs them in workers.
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

TEXT = "Grüße aus Köln, naïve café: ½ € — ありがとう"


def numpy() -> Any:
    import numpy as np

    return int(np.arange(100).reshape(10, 10).sum(axis=0)[3])


def pandas() -> Any:
    import pandas as pd

    return pd.DataFrame({"a": [1, 2, 3], "b": [4, 5, 6]}).sum().to_dict()


def scipy() -> Any:
    from scipy import special

    return float(special.comb(30, 7))


def pydantic() -> Any:
    from pydantic import BaseModel

    class Point(BaseModel):
        x: int
        y: float

    return Point.model_validate({"x": "3", "y": 1.5}).model_dump()


def orjson() -> Any:
    import orjson as m

    return m.dumps({"a": [1, 2.5, None], "t": TEXT}).decode()


def lxml() -> Any:
    from lxml import etree

    return etree.fromstring("<a><b>x</b><b>y</b></a>").xpath("string(//b[2])")


def pillow() -> Any:
    from PIL import Image

    img = Image.new("RGB", (8, 8), (10, 20, 30)).rotate(45)
    return hashlib.sha256(img.tobytes()).hexdigest()


def cryptography() -> Any:
    from cryptography.hazmat.primitives import hashes

    h = hashes.Hash(hashes.SHA256())
    h.update(b"interpexec")
    return h.finalize().hex()


def pyyaml() -> Any:
    import yaml

    return yaml.safe_dump(yaml.safe_load("a: [1, 2]\nb: {c: x}\n"))


def msgpack() -> Any:
    import msgpack as m

    return m.packb({"a": [1, 2, 3], "t": TEXT}).hex()


def simplejson() -> Any:
    import simplejson as m

    return m.dumps({"a": [1, 2.5], "t": TEXT}, sort_keys=True)


def ujson() -> Any:
    import ujson as m

    return m.dumps({"a": [1, 2.5], "t": TEXT}, sort_keys=True)


def regex() -> Any:
    import regex as m

    return m.findall(r"\p{L}+", TEXT)


def requests() -> Any:
    import requests as m

    response = m.models.Response()
    response._content = ("Grüße aus Köln, ça va très bien, merci " * 3).encode("cp1252")
    return response.apparent_encoding


def charset_normalizer() -> Any:
    from charset_normalizer import from_bytes

    best = from_bytes(("Grüße aus Köln, ça va très bien, merci " * 3).encode("cp1252")).best()
    return best.encoding if best else None


def jinja2() -> Any:
    import jinja2 as m

    return m.Template("{% for x in xs %}{{ x|upper }},{% endfor %}").render(xs=["a", "b"])


def markupsafe() -> Any:
    import markupsafe as m

    return str(m.escape("<b>&'\"</b>"))


def markdown() -> Any:
    import markdown as m

    return m.markdown("# Title\n\n*em* and `code`")


def docutils() -> Any:
    from docutils.core import publish_parts

    return publish_parts("Title\n=====\n\n*em* and ``code``", writer_name="html")["body"]


def pygments() -> Any:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return highlight("def f(x):\n    return x + 1\n", PythonLexer(), HtmlFormatter())


def sympy() -> Any:
    import sympy as m

    x = m.Symbol("x")
    return str(m.expand((x + 1) ** 3))


def networkx() -> Any:
    import networkx as nx

    return nx.shortest_path_length(nx.path_graph(10), 0, 7)


def attrs() -> Any:
    import attrs as m

    @m.define
    class P:
        x: int
        y: int = 2

    return m.asdict(P(1))


def python_dateutil() -> Any:
    from dateutil import parser

    return parser.parse("Tue, 2 Jan 2024 03:04:05 +0100").isoformat()


def pytz() -> Any:
    import pytz as m

    return m.timezone("Europe/Paris").localize(datetime.datetime(2024, 7, 1, 12)).isoformat()


def sqlalchemy() -> Any:
    import sqlalchemy as sa

    engine = sa.create_engine("sqlite://")
    with engine.connect() as conn:
        return conn.execute(sa.text("select 6 * 7")).scalar()


def zstandard() -> Any:
    import zstandard as m

    data = TEXT.encode() * 50
    return (len(m.ZstdCompressor(level=3).compress(data)), m.ZstdDecompressor().decompress(m.compress(data)) == data)


def lz4() -> Any:
    import lz4.frame

    data = TEXT.encode() * 50
    return lz4.frame.decompress(lz4.frame.compress(data)) == data


def xxhash() -> Any:
    import xxhash as m

    return m.xxh64(TEXT.encode()).hexdigest()


def tqdm() -> Any:
    from tqdm import tqdm as bar

    return sum(bar(range(100), disable=True))


def click() -> Any:
    import click as m

    return m.style("x", fg="red", bold=True)


def rich() -> Any:
    from rich.console import Console

    console = Console(width=40, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print("[bold]Hello[/bold] world")
    return console.export_text()


def toolz() -> Any:
    import toolz as m

    return sorted(m.frequencies("abracadabra").items())


def more_itertools() -> Any:
    import more_itertools as m

    return list(m.chunked(range(7), 3))


def idna() -> Any:
    import idna as m

    return m.encode("ドメイン.テスト").decode()


def urllib3() -> Any:
    import urllib3 as m

    return str(m.util.parse_url("https://user@example.com:8443/p?q=1"))


def six() -> Any:
    import six as m

    return m.ensure_str(b"x") + m.text_type("y")


def packaging() -> Any:
    from packaging.version import Version

    return sorted(["1.10", "1.2", "1.2rc1"], key=Version)


def pyparsing() -> Any:
    import pyparsing as pp

    return pp.delimited_list(pp.Word(pp.nums)).parse_string("1, 22, 333").as_list()


def psutil() -> Any:
    import psutil as m

    return m.cpu_count() is not None


def joblib() -> Any:
    import joblib as m

    return m.hash([1, 2, "x"])


def cloudpickle() -> Any:
    import pickle

    import cloudpickle as m

    return pickle.loads(m.dumps(lambda x: x * 2))(21)


def sortedcontainers() -> Any:
    from sortedcontainers import SortedList

    return list(SortedList([5, 1, 4, 2]).irange(2, 4))


def beautifulsoup4() -> Any:
    from bs4 import BeautifulSoup

    return BeautifulSoup("<p>x <b>y</b></p>", "html.parser").p.get_text()


def mpmath() -> Any:
    import mpmath as m

    m.mp.dps = 30
    return str(m.sqrt(2))


def protobuf() -> Any:
    from google.protobuf import struct_pb2

    s = struct_pb2.Struct()
    s.update({"a": 1, "b": "x"})
    return s.SerializeToString(deterministic=True).hex()


def cffi() -> Any:
    import cffi as m

    ffi = m.FFI()
    return ffi.new("int[3]", [1, 2, 3])[2]


def rapidfuzz() -> Any:
    from rapidfuzz import fuzz

    return fuzz.ratio("interpreter", "interpreters")
