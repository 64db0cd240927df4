//! Hand-built tar layers for tests, including the hostile ones a real tar tool refuses to
//! write (`..` names, absolute names, links out of the tree, whiteouts of `..`). Names go
//! into the header as given; PAX records carry long names, long link targets and xattrs.

/// A tar stream under construction.
#[derive(Default)]
pub struct TarBuilder {
    buf: Vec<u8>,
}

/// One entry's fields.
#[derive(Clone)]
pub struct Entry<'a> {
    /// Name, written as is.
    pub name: &'a [u8],
    /// Type flag: b'0' file, b'5' dir, b'2' symlink, b'1' hard link, b'3' char, b'4' block, b'6' fifo.
    pub kind: u8,
    /// Permission bits (and setuid/setgid/sticky).
    pub mode: u32,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// Modification time (seconds).
    pub mtime: u64,
    /// File content.
    pub data: &'a [u8],
    /// Link target (symlinks, hard links).
    pub link: &'a [u8],
    /// Device numbers.
    pub dev: (u32, u32),
    /// Extended attributes (PAX `SCHILY.xattr.`).
    pub xattrs: Vec<(&'a str, &'a [u8])>,
}

impl<'a> Entry<'a> {
    /// A regular file.
    pub fn file(name: &'a str, data: &'a [u8]) -> Entry<'a> {
        Entry {
            name: name.as_bytes(),
            kind: b'0',
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 1_700_000_000,
            data,
            link: b"",
            dev: (0, 0),
            xattrs: Vec::new(),
        }
    }

    /// A directory.
    pub fn dir(name: &'a str) -> Entry<'a> {
        Entry {
            kind: b'5',
            mode: 0o755,
            ..Entry::file(name, b"")
        }
    }

    /// A symlink.
    pub fn symlink(name: &'a str, target: &'a str) -> Entry<'a> {
        Entry {
            kind: b'2',
            mode: 0o777,
            link: target.as_bytes(),
            ..Entry::file(name, b"")
        }
    }

    /// A hard link.
    pub fn hardlink(name: &'a str, target: &'a str) -> Entry<'a> {
        Entry {
            kind: b'1',
            link: target.as_bytes(),
            ..Entry::file(name, b"")
        }
    }

    /// A character device.
    pub fn chardev(name: &'a str, major: u32, minor: u32) -> Entry<'a> {
        Entry {
            kind: b'3',
            dev: (major, minor),
            ..Entry::file(name, b"")
        }
    }

    /// A block device.
    pub fn blockdev(name: &'a str, major: u32, minor: u32) -> Entry<'a> {
        Entry {
            kind: b'4',
            dev: (major, minor),
            ..Entry::file(name, b"")
        }
    }

    /// A fifo.
    pub fn fifo(name: &'a str) -> Entry<'a> {
        Entry {
            kind: b'6',
            ..Entry::file(name, b"")
        }
    }
}

fn octal(field: &mut [u8], v: u64) {
    let s = format!("{:0w$o}", v, w = field.len() - 1);
    let b = s.as_bytes();
    let b = &b[b.len().saturating_sub(field.len() - 1)..];
    field[..b.len()].copy_from_slice(b);
    field[b.len()] = 0;
}

fn pax_record(key: &str, val: &[u8]) -> Vec<u8> {
    let body_len = 1 + key.len() + 1 + val.len() + 1;
    let mut n = body_len + 1;
    loop {
        let total = n.to_string().len() + body_len;
        if total == n {
            break;
        }
        n = total;
    }
    let mut r = format!("{n} {key}=").into_bytes();
    r.extend_from_slice(val);
    r.push(b'\n');
    r
}

impl TarBuilder {
    /// An empty stream.
    pub fn new() -> TarBuilder {
        TarBuilder::default()
    }

    fn header(&mut self, name: &[u8], kind: u8, e: &Entry<'_>, size: u64, link: &[u8]) {
        let mut h = [0u8; 512];
        let n = name.len().min(100);
        h[..n].copy_from_slice(&name[..n]);
        octal(&mut h[100..108], e.mode as u64);
        octal(&mut h[108..116], e.uid.min(0o7777777));
        octal(&mut h[116..124], e.gid.min(0o7777777));
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], e.mtime);
        h[156] = kind;
        let l = link.len().min(100);
        h[157..157 + l].copy_from_slice(&link[..l]);
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        octal(&mut h[329..337], e.dev.0 as u64);
        octal(&mut h[337..345], e.dev.1 as u64);
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| *b as u32).sum();
        let s = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(s.as_bytes());
        self.buf.extend_from_slice(&h);
    }

    fn data(&mut self, d: &[u8]) {
        self.buf.extend_from_slice(d);
        let pad = (512 - d.len() % 512) % 512;
        self.buf.extend(std::iter::repeat_n(0u8, pad));
    }

    /// Append an entry (with a PAX header first when it needs one).
    pub fn add(&mut self, e: Entry<'_>) -> &mut Self {
        let mut pax = Vec::new();
        if e.name.len() > 100 {
            pax.extend(pax_record("path", e.name));
        }
        if e.link.len() > 100 {
            pax.extend(pax_record("linkpath", e.link));
        }
        if e.uid > 0o7777777 {
            pax.extend(pax_record("uid", e.uid.to_string().as_bytes()));
        }
        if e.gid > 0o7777777 {
            pax.extend(pax_record("gid", e.gid.to_string().as_bytes()));
        }
        for (k, v) in &e.xattrs {
            pax.extend(pax_record(&format!("SCHILY.xattr.{k}"), v));
        }
        if !pax.is_empty() {
            let pe = Entry {
                mode: 0o644,
                ..e.clone()
            };
            self.header(b"PaxHeaders/x", b'x', &pe, pax.len() as u64, b"");
            self.data(&pax);
        }
        let size = if e.kind == b'0' {
            e.data.len() as u64
        } else {
            0
        };
        self.header(e.name, e.kind, &e, size, e.link);
        if e.kind == b'0' {
            self.data(e.data);
        }
        self
    }

    /// The finished stream (with the two zero blocks that end a tar).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        out.extend(std::iter::repeat_n(0u8, 1024));
        out
    }
}

/// Build a layer from entries.
pub fn layer(entries: Vec<Entry<'_>>) -> Vec<u8> {
    let mut b = TarBuilder::new();
    for e in entries {
        b.add(e);
    }
    b.finish()
}

/// A gzip-compressed layer of one file of `unpacked` bytes of zeros (rounded down to a
/// multiple of 64 MiB, less the tar's framing), made of concatenated gzip members (a valid
/// gzip stream), so that a few MiB stand for gigabytes without compressing them all: a
/// decompression bomb. Its diff id is not computed (the unpacker must refuse it first).
pub fn gzip_bomb(unpacked: u64) -> Vec<u8> {
    use std::io::Write;
    const CHUNK: u64 = 64 << 20;
    let chunks = (unpacked / CHUNK).max(1);
    let gz = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    // header + (size) data + 1024 bytes of end-of-archive zeros == 512 + chunks * CHUNK
    let size = chunks * CHUNK - 1024;
    let mut b = TarBuilder::new();
    b.header(b"zeros", b'0', &Entry::file("zeros", b""), size, b"");
    let mut out = gz(&b.buf);
    let zeros = gz(&vec![0u8; CHUNK as usize]);
    for _ in 0..chunks {
        out.extend_from_slice(&zeros);
    }
    out
}
