//! SPDY/3.1 framing, as much as Kubernetes' streaming protocols use (what client-go and
//! kubelet speak through moby/spdystream): streams opened by the client with SYN_STREAM and
//! answered with SYN_REPLY, data frames with FIN, PING echoed, GOAWAY, RST_STREAM, and
//! everything else (SETTINGS, WINDOW_UPDATE, RST_STREAM, HEADERS) read and ignored (spdystream does no flow control of its
//! own).
//!
//! Header blocks are zlib streams, one per direction and connection. The client's are
//! compressed with the SPDY/3 dictionary ([`DICTIONARY`]), so they are inflated with that
//! dictionary as the history a back-reference may reach; ours are compressed without one
//! (a zlib header without FDICT), which the spec's readers accept.

use std::collections::HashMap;

use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};

/// The SPDY/3 header compression dictionary (the spec's, section 2.6.10.1).
pub const DICTIONARY: &[u8] = include_bytes!("spdy3_dictionary.bin");

/// Largest frame accepted (header blocks and data are far smaller in practice).
const MAX_FRAME: usize = 1 << 20;

/// Control frame types.
pub mod kind {
    /// Open a stream.
    pub const SYN_STREAM: u16 = 1;
    /// Accept a stream.
    pub const SYN_REPLY: u16 = 2;
    /// Ping (echoed).
    pub const PING: u16 = 6;
    /// The connection is going away.
    pub const GOAWAY: u16 = 7;
}

/// FIN: the sender's last frame on the stream.
pub const FLAG_FIN: u8 = 1;

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A control frame: its type, flags and payload.
    Control {
        /// The type.
        kind: u16,
        /// Flags.
        flags: u8,
        /// Payload.
        payload: Vec<u8>,
    },
    /// Data on a stream.
    Data {
        /// The stream.
        stream: u32,
        /// Flags (FIN).
        flags: u8,
        /// The bytes.
        data: Vec<u8>,
    },
}

/// Take one whole frame off the front of `buf`, if it holds one.
pub fn parse(buf: &mut Vec<u8>) -> Result<Option<Frame>, String> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
    if len > MAX_FRAME {
        return Err(format!("SPDY frame of {len} bytes is too large"));
    }
    if buf.len() < 8 + len {
        return Ok(None);
    }
    let flags = buf[4];
    let payload = buf[8..8 + len].to_vec();
    let frame = if buf[0] & 0x80 != 0 {
        let version = u16::from_be_bytes([buf[0] & 0x7f, buf[1]]);
        if version != 3 {
            return Err(format!("SPDY version {version} is not served (3 is)"));
        }
        Frame::Control {
            kind: u16::from_be_bytes([buf[2], buf[3]]),
            flags,
            payload,
        }
    } else {
        Frame::Data {
            stream: u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) & 0x7fff_ffff,
            flags,
            data: payload,
        }
    };
    buf.drain(..8 + len);
    Ok(Some(frame))
}

fn header(out: &mut Vec<u8>, first: [u8; 4], flags: u8, len: usize) {
    out.extend_from_slice(&first);
    out.push(flags);
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
}

/// A control frame's bytes.
pub fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    let k = kind.to_be_bytes();
    header(&mut out, [0x80, 0x03, k[0], k[1]], flags, payload.len());
    out.extend_from_slice(payload);
    out
}

/// A data frame's bytes.
pub fn data(stream: u32, flags: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + bytes.len());
    header(
        &mut out,
        (stream & 0x7fff_ffff).to_be_bytes(),
        flags,
        bytes.len(),
    );
    out.extend_from_slice(bytes);
    out
}

/// The 31-bit stream id at the start of a control payload.
pub fn stream_id(payload: &[u8]) -> Option<u32> {
    payload
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
}

/// Decodes the peer's header blocks (one zlib stream per connection).
pub struct HeaderReader {
    inflater: Box<DecompressorOxide>,
    /// Everything inflated so far, after the dictionary: the history back-references
    /// reach into.
    history: Vec<u8>,
    /// Bytes of the zlib header still to skip (2, plus 4 for a dictionary id).
    header: Vec<u8>,
    started: bool,
}

impl Default for HeaderReader {
    fn default() -> Self {
        HeaderReader {
            inflater: Box::default(),
            history: DICTIONARY.to_vec(),
            header: Vec::new(),
            started: false,
        }
    }
}

impl HeaderReader {
    /// The name/value pairs of one compressed header block (names lowercased; values
    /// with NULs separating several).
    pub fn read(&mut self, mut block: &[u8]) -> Result<HashMap<String, String>, String> {
        if !self.started {
            // The zlib header: CMF, FLG, and the dictionary id when FLG has FDICT.
            while self.header.len() < 2 && !block.is_empty() {
                self.header.push(block[0]);
                block = &block[1..];
            }
            if self.header.len() < 2 {
                return Err("SPDY header block shorter than its zlib header".into());
            }
            let want = if self.header[1] & 0x20 != 0 { 6 } else { 2 };
            while self.header.len() < want && !block.is_empty() {
                self.header.push(block[0]);
                block = &block[1..];
            }
            if self.header.len() < want {
                return Err("SPDY header block shorter than its zlib header".into());
            }
            self.started = true;
        }
        // Kept whole (the decompressor's window is the buffer): a connection's header
        // blocks are few and small, so a peer sending megabytes of them is refused.
        if self.history.len() > MAX_FRAME {
            return Err("SPDY header blocks exceed 1 MiB on one connection".into());
        }
        let start = self.history.len();
        let mut input = block;
        loop {
            let pos = self.history.len();
            self.history.resize(pos + 16 * 1024, 0);
            let (status, used, written) = decompress(
                &mut self.inflater,
                input,
                &mut self.history,
                pos,
                inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF
                    | inflate_flags::TINFL_FLAG_HAS_MORE_INPUT,
            );
            self.history.truncate(pos + written);
            input = &input[used..];
            match status {
                TINFLStatus::HasMoreOutput => continue,
                TINFLStatus::NeedsMoreInput | TINFLStatus::Done if input.is_empty() => break,
                TINFLStatus::NeedsMoreInput | TINFLStatus::Done => continue,
                s => return Err(format!("SPDY header block: inflate failed ({s:?})")),
            }
        }
        parse_pairs(&self.history[start..])
    }
}

fn parse_pairs(b: &[u8]) -> Result<HashMap<String, String>, String> {
    let bad = || "SPDY header block is malformed".to_string();
    let u32_at = |i: usize| -> Result<usize, String> {
        b.get(i..i + 4)
            .map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]) as usize)
            .ok_or_else(bad)
    };
    let n = u32_at(0)?;
    let mut i = 4;
    let mut out = HashMap::new();
    for _ in 0..n.min(1024) {
        let nl = u32_at(i)?;
        let name = b.get(i + 4..i + 4 + nl).ok_or_else(bad)?;
        i += 4 + nl;
        let vl = u32_at(i)?;
        let value = b.get(i + 4..i + 4 + vl).ok_or_else(bad)?;
        i += 4 + vl;
        out.insert(
            String::from_utf8_lossy(name).to_ascii_lowercase(),
            String::from_utf8_lossy(value).into_owned(),
        );
    }
    Ok(out)
}

/// Encodes our header blocks (one zlib stream per connection, no dictionary).
pub struct HeaderWriter {
    deflater: flate2::Compress,
}

impl Default for HeaderWriter {
    fn default() -> Self {
        HeaderWriter {
            deflater: flate2::Compress::new(flate2::Compression::fast(), true),
        }
    }
}

impl HeaderWriter {
    /// One compressed header block of `pairs`.
    pub fn write(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = (pairs.len() as u32).to_be_bytes().to_vec();
        for (k, v) in pairs {
            for s in [k, v] {
                plain.extend_from_slice(&(s.len() as u32).to_be_bytes());
                plain.extend_from_slice(s.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut input = &plain[..];
        loop {
            out.reserve(256);
            let before_in = self.deflater.total_in();
            let _ = self
                .deflater
                .compress_vec(input, &mut out, flate2::FlushCompress::Sync);
            let used = (self.deflater.total_in() - before_in) as usize;
            input = &input[used..];
            // A sync flush ends on an empty stored block: done when all went in and the
            // output buffer was not the limit.
            if input.is_empty() && out.len() < out.capacity() {
                return out;
            }
        }
    }
}

/// A SYN_REPLY for `stream` with no headers.
pub fn syn_reply(stream: u32, headers: &mut HeaderWriter) -> Vec<u8> {
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend(headers.write(&[]));
    control(kind::SYN_REPLY, 0, &payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_partial_input_waits() {
        let mut buf = data(5, FLAG_FIN, b"hello");
        buf.extend(control(kind::PING, 0, &7u32.to_be_bytes()));
        let mut partial = buf[..10].to_vec();
        assert_eq!(parse(&mut partial).unwrap(), None);
        assert_eq!(
            parse(&mut buf).unwrap(),
            Some(Frame::Data {
                stream: 5,
                flags: FLAG_FIN,
                data: b"hello".to_vec()
            })
        );
        assert_eq!(
            parse(&mut buf).unwrap(),
            Some(Frame::Control {
                kind: kind::PING,
                flags: 0,
                payload: 7u32.to_be_bytes().to_vec()
            })
        );
        assert!(buf.is_empty());
        let mut v2 = control(kind::PING, 0, &[0; 4]);
        v2[1] = 2;
        assert!(parse(&mut v2).unwrap_err().contains("version 2"));
    }

    #[test]
    fn our_header_blocks_read_back_across_one_stream() {
        let mut w = HeaderWriter::default();
        let mut r = HeaderReader::default();
        for i in 0..3 {
            let port = i.to_string();
            let block = w.write(&[("streamType", "data"), ("port", &port)]);
            let h = r.read(&block).unwrap();
            assert_eq!(h["streamtype"], "data");
            assert_eq!(h["port"], port);
        }
        assert_eq!(DICTIONARY.len(), 1423);
    }

    /// Header blocks as client-go (moby/spdystream) sent them to this server: zlib with the
    /// SPDY/3 dictionary (FDICT set), back-references into it.
    #[test]
    fn client_go_header_blocks_inflate_with_the_dictionary() {
        let mut r = HeaderReader::default();
        let h = r.read(CLIENT_GO_ERROR_STREAM).unwrap();
        assert_eq!(h["streamtype"], "error");
        let h = r.read(CLIENT_GO_STDOUT_STREAM).unwrap();
        assert_eq!(h["streamtype"], "stdout");
    }

    /// crictl 1.37's `exec` (client-go's SPDY executor), the first two SYN_STREAMs' header
    /// blocks: `streamType: error` (with the zlib header and the dictionary's id), then
    /// `streamType: stdout`.
    const CLIENT_GO_ERROR_STREAM: &[u8] = &[
        120, 249, 227, 198, 167, 194, 98, 96, 96, 96, 4, 167, 179, 146, 162, 212, 196, 92, 104, 81,
        194, 154, 10, 10, 104, 0, 0, 0, 0, 255, 255,
    ];
    const CLIENT_GO_STDOUT_STREAM: &[u8] =
        &[194, 42, 197, 86, 92, 146, 146, 95, 90, 2, 0, 0, 0, 255, 255];
}
