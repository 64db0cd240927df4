//! Netlink message encoding and decoding: a header, a family header, then attributes
//! (type-length-value, 4-byte aligned, nestable).

use super::consts::{NLA_F_NESTED, NLA_TYPE_MASK};

/// Round up to netlink's 4-byte alignment.
pub fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// A netlink request under construction.
pub struct Msg {
    buf: Vec<u8>,
}

impl Msg {
    /// A message of type `ty` with `flags` (NLM_F_REQUEST/ACK are added when sending).
    pub fn new(ty: u16, flags: u16) -> Msg {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by finish()
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // seq
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
        Msg { buf }
    }

    /// Append raw bytes (a family header such as ifinfomsg), padded to alignment.
    pub fn raw(mut self, bytes: &[u8]) -> Msg {
        self.buf.extend_from_slice(bytes);
        self.pad();
        self
    }

    fn pad(&mut self) {
        let n = align(self.buf.len());
        self.buf.resize(n, 0);
    }

    /// Append an attribute.
    pub fn attr(mut self, ty: u16, data: &[u8]) -> Msg {
        self.push_attr(ty, data);
        self
    }

    fn push_attr(&mut self, ty: u16, data: &[u8]) {
        let len = (4 + data.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
    }

    /// Append a NUL-terminated string attribute.
    pub fn attr_str(self, ty: u16, s: &str) -> Msg {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.attr(ty, &v)
    }

    /// Append a u32 attribute (host byte order).
    pub fn attr_u32(self, ty: u16, v: u32) -> Msg {
        self.attr(ty, &v.to_ne_bytes())
    }

    /// Open a nested attribute; everything appended until [`Msg::end_nest`] goes inside.
    pub fn nest(mut self, ty: u16) -> (Msg, usize) {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        (self, at)
    }

    /// Close the nested attribute opened at `at`.
    pub fn end_nest(mut self, at: usize) -> Msg {
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    /// OR more flags into the header.
    pub fn add_flags(&mut self, flags: u16) {
        let f = self.flags() | flags;
        self.buf[6..8].copy_from_slice(&f.to_ne_bytes());
    }

    /// The header flags.
    pub fn flags(&self) -> u16 {
        u16::from_ne_bytes([self.buf[6], self.buf[7]])
    }

    /// Set length and sequence number; the bytes to send.
    pub fn finish(&mut self, seq: u32) -> &[u8] {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        &self.buf
    }
}

/// A received message's header fields.
pub struct Header {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
}

/// Split a receive buffer into (header, payload) pairs.
pub fn messages(mut buf: &[u8]) -> impl Iterator<Item = (Header, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize;
        if len < 16 || len > buf.len() {
            return None;
        }
        let hdr = Header {
            ty: u16::from_ne_bytes([buf[4], buf[5]]),
            flags: u16::from_ne_bytes([buf[6], buf[7]]),
            seq: u32::from_ne_bytes(buf[8..12].try_into().unwrap()),
        };
        let payload = &buf[16..len];
        buf = &buf[align(len).min(buf.len())..];
        Some((hdr, payload))
    })
}

/// Iterator over the attributes in a buffer: (type without flags, data).
pub struct Attrs<'a> {
    buf: &'a [u8],
}

impl<'a> Attrs<'a> {
    /// Attributes packed in `buf`.
    pub fn new(buf: &'a [u8]) -> Attrs<'a> {
        Attrs { buf }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([self.buf[0], self.buf[1]]) as usize;
        let ty = u16::from_ne_bytes([self.buf[2], self.buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > self.buf.len() {
            return None;
        }
        let data = &self.buf[4..len];
        self.buf = &self.buf[align(len).min(self.buf.len())..];
        Some((ty, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_aligned_and_nested_lengths_cover_their_children() {
        let (m, at) = Msg::new(16, 0).raw(&[1, 2, 3]).nest(18);
        let mut m = m.attr_str(1, "veth").end_nest(at);
        let bytes = m.finish(7).to_vec();
        // header 16 + family header 3 padded to 4 + nest header 4 + "veth\0" attr 4+5 -> 12
        assert_eq!(bytes.len(), 16 + 4 + 4 + 12);
        assert_eq!(u32::from_ne_bytes(bytes[0..4].try_into().unwrap()), 36);
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 7);
        let attrs: Vec<_> = Attrs::new(&bytes[20..]).collect();
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].0, 18, "the nested flag is masked off");
        assert_eq!(attrs[0].1.len(), 12);
        let inner: Vec<_> = Attrs::new(attrs[0].1).collect();
        assert_eq!(inner, vec![(1, &b"veth\0"[..])]);
    }

    #[test]
    fn truncated_buffers_end_iteration_instead_of_panicking() {
        assert_eq!(Attrs::new(&[8, 0, 1, 0, 1]).count(), 0);
        assert_eq!(Attrs::new(&[2, 0, 1, 0]).count(), 0);
        assert_eq!(messages(&[40, 0, 0, 0, 2, 0, 0, 0]).count(), 0);
    }
}
