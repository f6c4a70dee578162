# SPDX-License-Identifier: Apache-2.0
"""The tests' own reader of FlatBuffers binaries (TensorFlow Lite,
ExecuTorch): the oracle the real files are checked against, written from
the FlatBuffers wire format alone (root offset, vtables, forward offsets,
length-prefixed vectors), in plain Python, independent of modelfs."""

import struct


class Walker:
    def __init__(self, data):
        self.d = data

    def u(self, fmt, at):
        return struct.unpack_from("<" + fmt, self.d, at)[0]

    def root(self):
        return self.u("I", 0)

    def ref(self, at):
        return at + self.u("I", at)

    def field(self, table, fid):
        """Where field `fid` of the table at `table` lies, None if absent."""
        vt = table - self.u("i", table)
        if 4 + 2 * fid >= self.u("H", vt):
            return None
        off = self.u("H", vt + 4 + 2 * fid)
        return table + off if off else None

    def scalar(self, table, fid, fmt, default=0):
        at = self.field(table, fid)
        return default if at is None else self.u(fmt, at)

    def table(self, table, fid):
        at = self.field(table, fid)
        return None if at is None else self.ref(at)

    def vector(self, table, fid):
        """(first element's position, count), (None, 0) if absent."""
        at = self.field(table, fid)
        if at is None:
            return None, 0
        v = self.ref(at)
        return v + 4, self.u("I", v)

    def tables(self, table, fid):
        start, n = self.vector(table, fid)
        return [self.ref(start + 4 * i) for i in range(n)]

    def string(self, table, fid):
        """The string's text, None if absent."""
        start, n = self.vector(table, fid)
        return None if start is None else self.d[start:start + n].decode()

    def scalars(self, table, fid, fmt):
        start, n = self.vector(table, fid)
        size = struct.calcsize(fmt)
        return [self.u(fmt, start + size * i) for i in range(n)]
