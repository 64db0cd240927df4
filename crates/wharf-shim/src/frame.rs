//! Framing of attach streams (docker's 8-byte header): `[stream, 0, 0, 0, len: u32 BE]`
//! then `len` bytes.
//!
//! Client to shim: [`STDIN`] data (an empty [`STDIN`] frame closes the process's stdin),
//! [`RESIZE`] (rows and columns, two u16 BE). Shim to client: [`STDOUT`], [`STDERR`] (a tty
//! has only stdout), and finally [`EXIT`] with the exit record as JSON, after which the shim
//! closes the connection. Frames are used for terminals too, so the exit can follow the
//! output on the same stream.

use std::io::{self, Read, Write};

/// Stdin data (client to shim).
pub const STDIN: u8 = 0;
/// Stdout data (shim to client).
pub const STDOUT: u8 = 1;
/// Stderr data (shim to client).
pub const STDERR: u8 = 2;
/// The process exited; payload is the exit record (JSON). Last frame of a stream.
pub const EXIT: u8 = 3;
/// Terminal size (client to shim): rows, cols as u16 BE.
pub const RESIZE: u8 = 4;

/// Length of the header.
pub const HEADER: usize = 8;
/// Largest payload accepted.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// The header of a frame.
pub fn header(stream: u8, len: usize) -> [u8; HEADER] {
    let l = (len as u32).to_be_bytes();
    [stream, 0, 0, 0, l[0], l[1], l[2], l[3]]
}

/// Write one frame.
pub fn write(w: &mut impl Write, stream: u8, payload: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(HEADER + payload.len());
    buf.extend_from_slice(&header(stream, payload.len()));
    buf.extend_from_slice(payload);
    w.write_all(&buf)
}

/// Read one frame; None at a clean end of stream.
pub fn read(r: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut h = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "attach stream ended inside a frame header",
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("attach frame of {len} bytes is larger than {MAX_PAYLOAD}"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some((h[0], payload)))
}

/// Split one complete frame off the front of `buf`: (stream, payload range, bytes used).
/// None while the frame is incomplete; Err for an oversized frame.
pub fn parse(buf: &[u8]) -> Result<Option<(u8, std::ops::Range<usize>)>, usize> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(len);
    }
    if buf.len() < HEADER + len {
        return Ok(None);
    }
    Ok(Some((buf[0], HEADER..HEADER + len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_parse_incrementally() {
        let mut out = Vec::new();
        write(&mut out, STDOUT, b"hello").unwrap();
        write(&mut out, EXIT, b"").unwrap();
        assert_eq!(&out[..8], &[1, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(parse(&out[..10]), Ok(None));
        assert_eq!(parse(&out), Ok(Some((STDOUT, 8..13))));
        let mut r = &out[..];
        assert_eq!(read(&mut r).unwrap(), Some((STDOUT, b"hello".to_vec())));
        assert_eq!(read(&mut r).unwrap(), Some((EXIT, Vec::new())));
        assert_eq!(read(&mut r).unwrap(), None);
        let huge = header(STDIN, MAX_PAYLOAD + 1);
        assert_eq!(parse(&huge), Err(MAX_PAYLOAD + 1));
    }
}
