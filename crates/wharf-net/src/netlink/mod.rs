//! A small synchronous rtnetlink client: just the requests the network library makes (links,
//! addresses, routes), encoded and decoded by hand.
//!
//! Why hand-written: the library needs about a dozen request shapes; a general netlink crate
//! would add several crates of generated message types to the cold build for them. Each
//! message here is a byte buffer built from the kernel's UAPI layouts (`linux/rtnetlink.h`,
//! `linux/if_link.h`), and the unit tests check the encoding.
//!
//! A netlink socket belongs to the network namespace it was created in, for its whole
//! life, whichever thread uses it later. [`Netlink::open_in`] creates one inside another
//! namespace from a short-lived helper thread, so the calling thread never changes
//! namespace.

mod msg;
mod ops;

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};

pub use msg::{Attrs, Msg};
pub use ops::{Addr, Link, Route, VethSpec};

/// Netlink and rtnetlink constants (values from the kernel UAPI headers).
#[allow(missing_docs)]
pub mod consts {
    pub const NLMSG_ERROR: u16 = 2;
    pub const NLMSG_DONE: u16 = 3;
    pub const NLM_F_REQUEST: u16 = 0x1;
    pub const NLM_F_MULTI: u16 = 0x2;
    pub const NLM_F_ACK: u16 = 0x4;
    pub const NLM_F_DUMP: u16 = 0x300;
    pub const NLM_F_REPLACE: u16 = 0x100;
    pub const NLM_F_EXCL: u16 = 0x200;
    pub const NLM_F_CREATE: u16 = 0x400;
    pub const NLM_F_ACK_TLVS: u16 = 0x200;
    pub const NLM_F_CAPPED: u16 = 0x100;
    pub const NLMSGERR_ATTR_MSG: u16 = 1;

    pub const RTM_NEWLINK: u16 = 16;
    pub const RTM_DELLINK: u16 = 17;
    pub const RTM_GETLINK: u16 = 18;
    pub const RTM_SETLINK: u16 = 19;
    pub const RTM_NEWADDR: u16 = 20;
    pub const RTM_DELADDR: u16 = 21;
    pub const RTM_GETADDR: u16 = 22;
    pub const RTM_NEWROUTE: u16 = 24;
    pub const RTM_GETROUTE: u16 = 26;

    pub const NLA_F_NESTED: u16 = 0x8000;
    pub const NLA_TYPE_MASK: u16 = !(0x8000 | 0x4000);

    pub const IFLA_ADDRESS: u16 = 1;
    pub const IFLA_IFNAME: u16 = 3;
    pub const IFLA_MTU: u16 = 4;
    pub const IFLA_MASTER: u16 = 10;
    pub const IFLA_PROTINFO: u16 = 12;
    pub const IFLA_LINKINFO: u16 = 18;
    pub const IFLA_IFALIAS: u16 = 20;
    pub const IFLA_NET_NS_FD: u16 = 28;
    pub const IFLA_INFO_KIND: u16 = 1;
    pub const IFLA_INFO_DATA: u16 = 2;
    pub const VETH_INFO_PEER: u16 = 1;
    pub const IFLA_BRPORT_MODE: u16 = 4;

    pub const IFA_ADDRESS: u16 = 1;
    pub const IFA_LOCAL: u16 = 2;
    pub const IFA_BROADCAST: u16 = 4;
    pub const IFA_FLAGS: u16 = 8;
    pub const IFA_F_NODAD: u32 = 0x02;

    pub const RTA_DST: u16 = 1;
    pub const RTA_OIF: u16 = 4;
    pub const RTA_GATEWAY: u16 = 5;
    pub const RTA_TABLE: u16 = 15;
    pub const RT_TABLE_MAIN: u8 = 254;
    pub const RTPROT_STATIC: u8 = 4;
    pub const RT_SCOPE_UNIVERSE: u8 = 0;
    pub const RTN_UNICAST: u8 = 1;

    pub const IFF_UP: u32 = 0x1;
    pub const AF_BRIDGE: u8 = 7;

    pub const SOL_NETLINK: i32 = 270;
    pub const NETLINK_CAP_ACK: i32 = 10;
    pub const NETLINK_EXT_ACK: i32 = 11;
}

use consts::*;

/// A failed netlink request: the kernel's errno and, when it gave one, its extended-ack
/// message ("Invalid prefix for given prefix length" and the like).
#[derive(Debug)]
pub struct NlError {
    /// The errno the kernel answered with.
    pub errno: i32,
    /// The kernel's explanation, if any.
    pub ext: Option<String>,
}

impl NlError {
    fn io(e: io::Error) -> NlError {
        NlError {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            ext: None,
        }
    }

    /// Convert into the crate's error, describing what was being done.
    pub fn ctx(self, what: impl std::fmt::Display) -> crate::Error {
        let what = match &self.ext {
            Some(ext) => format!("{what} ({ext})"),
            None => what.to_string(),
        };
        crate::Error::os(what, io::Error::from_raw_os_error(self.errno))
    }
}

impl std::fmt::Display for NlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.errno))?;
        if let Some(ext) = &self.ext {
            write!(f, " ({ext})")?;
        }
        Ok(())
    }
}

/// Result of netlink requests.
pub type NlResult<T> = Result<T, NlError>;

/// A netlink socket (NETLINK_ROUTE unless opened otherwise) bound to the namespace it was
/// opened in.
pub struct Netlink {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl Netlink {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Netlink> {
        Netlink::open_protocol(libc::NETLINK_ROUTE)
    }

    /// A socket of another netlink family (NETLINK_NETFILTER for nf_tables queries).
    pub fn open_protocol(protocol: libc::c_int) -> io::Result<Netlink> {
        use rustix::net::{AddressFamily, Protocol, SocketFlags, SocketType};
        // NETLINK_ROUTE is 0, which rustix spells as no protocol.
        let protocol = std::num::NonZeroU32::new(protocol as u32).map(Protocol::from_raw);
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            protocol,
        )?;
        // Port id 0: the kernel chooses one.
        rustix::net::bind(&fd, &rustix::net::netlink::SocketAddrNetlink::new(0, 0))?;
        for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
            // Failure (an older kernel) only loses error detail.
            let _ = crate::sys::set_sockopt_int(fd.as_fd(), SOL_NETLINK, opt, 1);
        }
        Ok(Netlink {
            fd,
            seq: 1,
            buf: vec![0; 64 * 1024],
        })
    }

    /// A socket inside the network namespace `ns` (a namespace file's fd), made by a helper
    /// thread so the caller's own namespace never changes.
    pub fn open_in(ns: BorrowedFd<'_>) -> io::Result<Netlink> {
        crate::netns::run_in(Some(ns), Netlink::open)
    }

    fn send(&mut self, msg: &mut Msg) -> NlResult<u32> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let bytes = msg.finish(seq);
        // No address: an unconnected netlink socket sends to the kernel.
        rustix::net::send(&self.fd, bytes, SendFlags::empty())
            .map_err(|e| NlError::io(e.into()))?;
        Ok(seq)
    }

    fn recv(&mut self) -> NlResult<usize> {
        loop {
            match rustix::net::recv(&self.fd, &mut self.buf[..], RecvFlags::empty()) {
                Ok((n, _)) => return Ok(n),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(NlError::io(e.into())),
            }
        }
    }

    /// Send a request that changes something and wait for the kernel's acknowledgement.
    pub fn request(&mut self, mut msg: Msg) -> NlResult<()> {
        msg.add_flags(NLM_F_REQUEST | NLM_F_ACK);
        let seq = self.send(&mut msg)?;
        loop {
            let n = self.recv()?;
            let mut done = None;
            for (hdr, payload) in msg::messages(&self.buf[..n]) {
                if hdr.seq != seq {
                    continue;
                }
                if hdr.ty == NLMSG_ERROR {
                    done = Some(parse_error(hdr.flags, payload));
                }
            }
            if let Some(result) = done {
                return result;
            }
        }
    }

    /// Send a GET request (a dump when `msg` has NLM_F_DUMP) and collect the payloads of
    /// every answer message (each starting with its family header).
    pub fn fetch(&mut self, mut msg: Msg) -> NlResult<Vec<Vec<u8>>> {
        msg.add_flags(NLM_F_REQUEST);
        let dump = msg.flags() & NLM_F_DUMP == NLM_F_DUMP;
        let seq = self.send(&mut msg)?;
        let mut out = Vec::new();
        loop {
            let n = self.recv()?;
            for (hdr, payload) in msg::messages(&self.buf[..n]) {
                if hdr.seq != seq {
                    continue;
                }
                match hdr.ty {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        parse_error(hdr.flags, payload)?;
                        return Ok(out);
                    }
                    _ => {
                        out.push(payload.to_vec());
                        if !dump && hdr.flags & NLM_F_MULTI == 0 {
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }
}

/// Decode an NLMSG_ERROR payload: errno 0 is an acknowledgement.
fn parse_error(flags: u16, payload: &[u8]) -> NlResult<()> {
    if payload.len() < 4 {
        return Err(NlError {
            errno: libc::EIO,
            ext: Some("short netlink error message".into()),
        });
    }
    let code = i32::from_ne_bytes(payload[..4].try_into().unwrap());
    if code == 0 {
        return Ok(());
    }
    let mut ext = None;
    if flags & NLM_F_ACK_TLVS != 0 && payload.len() >= 20 {
        // The echoed request header (its payload too unless capped), then the TLVs.
        let echoed = u32::from_ne_bytes(payload[4..8].try_into().unwrap()) as usize;
        let skip = if flags & NLM_F_CAPPED != 0 {
            16
        } else {
            echoed
        };
        if let Some(tlvs) = payload.get(4 + msg::align(skip)..) {
            for (ty, data) in Attrs::new(tlvs) {
                if ty == NLMSGERR_ATTR_MSG {
                    let s = data.split(|b| *b == 0).next().unwrap_or_default();
                    ext = Some(String::from_utf8_lossy(s).into_owned());
                }
            }
        }
    }
    Err(NlError { errno: -code, ext })
}
