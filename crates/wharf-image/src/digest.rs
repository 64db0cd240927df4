//! Content digests (`sha256:<hex>`) and readers that hash what passes through them.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// A validated `sha256:<64 lowercase hex>` digest. Other algorithms are refused when parsed,
/// so every digest in the store names a file by a fixed-size, safe name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    /// The digest a finished hasher computed.
    pub fn from_hasher(h: Sha256) -> Digest {
        Digest(format!("sha256:{}", hex(&h.finalize())))
    }

    /// The hex part (the file name in the content store).
    pub fn hex(&self) -> &str {
        &self.0[7..]
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// First 12 hex digits, as `docker images` shows ids.
    pub fn short(&self) -> &str {
        &self.hex()[..12]
    }
}

impl FromStr for Digest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Digest> {
        let bad = |why: &str| Error::Invalid(format!("invalid digest {s:?}: {why}"));
        let (algo, hexpart) = s.split_once(':').ok_or_else(|| bad("no algorithm"))?;
        if algo != "sha256" {
            return Err(bad("only sha256 digests are supported"));
        }
        if hexpart.len() != 64
            || !hexpart
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad("want 64 lowercase hex digits"));
        }
        Ok(Digest(s.to_string()))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The chain id of a layer stack (OCI image spec): the first layer's diff id, then
/// `sha256(parent_chain + " " + diff_id)`. It names a snapshot: the same layers in the same
/// order share one snapshot between images.
pub fn chain_ids(diff_ids: &[Digest]) -> Vec<Digest> {
    let mut out: Vec<Digest> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(parent) => Digest::of(format!("{parent} {d}").as_bytes()),
        };
        out.push(next);
    }
    out
}

/// A reader that hashes and counts every byte read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    /// Wrap `inner`.
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Read the rest (e.g. a tar stream's padding after its end marker) and return the digest
    /// and size of everything that passed through.
    pub fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((Digest::from_hasher(self.hasher), self.count))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let d: Digest = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            .parse()
            .unwrap();
        assert_eq!(d, Digest::of(b""));
        assert!("sha256:E3B0".parse::<Digest>().is_err());
        assert!("md5:abcd".parse::<Digest>().is_err());
        assert!("sha256:../../etc/passwd".parse::<Digest>().is_err());
    }

    #[test]
    fn chain_ids_follow_the_spec() {
        let a = Digest::of(b"a");
        let b = Digest::of(b"b");
        let c = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(c[0], a);
        assert_eq!(c[1], Digest::of(format!("{a} {b}").as_bytes()));
    }
}
