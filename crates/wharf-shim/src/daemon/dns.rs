//! The pod's DNS responder, for pods on a user network: docker's embedded DNS, answered by
//! the pod's own shim (no process of its own, no daemon needed). It listens on
//! 127.0.0.11:53 (UDP) inside the pod's network namespace and answers A and AAAA
//! questions for the names of the pod's hosts file — which the engine keeps current with
//! the other pods of the network, their containers and aliases — and forwards every other
//! question to the upstream resolvers (the host's, or the pod's `--dns` servers) from the
//! host's namespace, where a loopback resolver such as systemd-resolved's is reachable too.
//!
//! So tools that ask a DNS server directly (nslookup, an nginx `resolver`, Go and musl
//! programs that skip /etc/hosts) find the same names /etc/hosts gives. UDP only: an
//! answer too large for one datagram is forwarded as the upstream gives it (truncated).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where the responder listens in the pod (docker's address).
pub const ADDRESS: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 11);
/// The TTL of local answers (docker's).
const TTL: u32 = 600;
/// A forwarded question waits this long for its answer.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest datagram handled.
const MAX_MESSAGE: usize = 4096;
/// The most questions forwarded and unanswered at once (beyond: SERVFAIL).
const MAX_PENDING: usize = 1024;
/// Bound of the hosts file read per question.
const HOSTS_LIMIT: u64 = 1 << 20;

/// A question of a DNS message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The name, lower case, without the final dot.
    pub name: String,
    /// Its type (1 A, 28 AAAA...).
    pub qtype: u16,
    /// Its class (1 IN).
    pub qclass: u16,
    /// Where the question ends in the message.
    pub end: usize,
}

/// The single question of a query (None: not a query of one question we can read).
pub fn question(msg: &[u8]) -> Option<Question> {
    if msg.len() < 12 {
        return None;
    }
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
    // A response, or not a standard query.
    if flags & 0x8000 != 0 || (flags >> 11) & 0xf != 0 || qdcount != 1 {
        return None;
    }
    let mut i = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = *msg.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        // No compression in a question we answer.
        if len & 0xc0 != 0 {
            return None;
        }
        let label = msg.get(i..i + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        i += len;
        if i > 255 + 12 {
            return None;
        }
    }
    let qtype = u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?]);
    let qclass = u16::from_be_bytes([*msg.get(i + 2)?, *msg.get(i + 3)?]);
    Some(Question {
        name: labels.join("."),
        qtype,
        qclass,
        end: i + 4,
    })
}

/// An answer to `query` (whose question is `q`) with these addresses and `rcode`.
pub fn answer(query: &[u8], q: &Question, addrs: &[IpAddr], rcode: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(q.end + addrs.len() * 28);
    out.extend_from_slice(&query[..2]);
    // QR, the query's opcode and RD, AA and RA, the rcode.
    let rd = query[2] & 0x01;
    out.push(0x80 | 0x04 | rd);
    out.push(0x80 | (rcode & 0x0f));
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&query[12..q.end]);
    for a in addrs {
        // The question's name, by a pointer to it.
        out.extend_from_slice(&[0xc0, 0x0c]);
        let (t, data): (u16, Vec<u8>) = match a {
            IpAddr::V4(v4) => (1, v4.octets().to_vec()),
            IpAddr::V6(v6) => (28, v6.octets().to_vec()),
        };
        out.extend_from_slice(&t.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

/// The addresses of `name` in hosts file text (None: the file does not know it).
pub fn lookup(hosts: &str, name: &str) -> Option<Vec<IpAddr>> {
    let mut found: Option<Vec<IpAddr>> = None;
    for line in hosts.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        if words.any(|w| w.eq_ignore_ascii_case(name)) {
            let list = found.get_or_insert_with(Vec::new);
            if !list.contains(&ip) {
                list.push(ip);
            }
        }
    }
    found
}

/// What the engine tells the shim to serve.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The pod's network namespace.
    pub netns: PathBuf,
    /// The pod's hosts file.
    pub hosts: PathBuf,
    /// Where other questions go.
    pub upstream: Vec<SocketAddr>,
}

/// The responder's sockets and the questions it forwarded.
pub struct Dns {
    /// 127.0.0.11:53 in the pod.
    listen: UdpSocket,
    /// To the upstream resolvers, in the host's namespace.
    upstream_sock: UdpSocket,
    hosts: PathBuf,
    upstream: Vec<SocketAddr>,
    /// Our id of a forwarded question: the client's id, its address, when.
    pending: HashMap<u16, (u16, SocketAddr, Instant)>,
    next_id: u16,
}

impl Dns {
    /// Bind the responder in the pod's namespace (the calling thread enters it for the
    /// bind, then comes back: the shim is single-threaded).
    pub fn open(s: &Setup) -> std::io::Result<Dns> {
        let own = std::fs::File::open("/proc/thread-self/ns/net")?;
        let pod = std::fs::File::open(&s.netns)?;
        rustix::thread::move_into_link_name_space(
            pod.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let bound = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ADDRESS), 53));
        rustix::thread::move_into_link_name_space(
            own.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let listen = bound?;
        listen.set_nonblocking(true)?;
        let upstream_sock = UdpSocket::bind("0.0.0.0:0")?;
        upstream_sock.set_nonblocking(true)?;
        Ok(Dns {
            listen,
            upstream_sock,
            hosts: s.hosts.clone(),
            upstream: s.upstream.clone(),
            pending: HashMap::new(),
            next_id: 1,
        })
    }

    /// The socket questions arrive on.
    pub fn listen_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.listen.as_fd()
    }

    /// The socket upstream answers arrive on.
    pub fn upstream_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.upstream_sock.as_fd()
    }

    /// Answer or forward the questions that arrived.
    pub fn on_query(&mut self) {
        let mut buf = [0u8; MAX_MESSAGE];
        while let Ok((n, from)) = self.listen.recv_from(&mut buf) {
            self.query(&buf[..n], from);
        }
    }

    fn query(&mut self, msg: &[u8], from: SocketAddr) {
        let Some(q) = question(msg) else {
            // Not one we read: the upstream may.
            self.forward(msg, from);
            return;
        };
        if q.qclass == 1 && matches!(q.qtype, 1 | 28) {
            let hosts = wharf_sys::contained::read_file(&self.hosts, HOSTS_LIMIT)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            if let Some(addrs) = lookup(&hosts, &q.name) {
                let want: Vec<IpAddr> = addrs
                    .into_iter()
                    .filter(|a| a.is_ipv4() == (q.qtype == 1))
                    .collect();
                let _ = self.listen.send_to(&answer(msg, &q, &want, 0), from);
                return;
            }
        }
        self.forward(msg, from);
    }

    fn forward(&mut self, msg: &[u8], from: SocketAddr) {
        let now = Instant::now();
        self.pending
            .retain(|_, (_, _, at)| now.duration_since(*at) < FORWARD_TIMEOUT);
        let fail = |s: &Self| {
            if let Some(q) = question(msg) {
                // SERVFAIL: nowhere to ask, or too many questions in flight.
                let _ = s.listen.send_to(&answer(msg, &q, &[], 2), from);
            }
        };
        let Some(server) = self.upstream.first().copied() else {
            return fail(self);
        };
        if self.pending.len() >= MAX_PENDING || msg.len() < 12 {
            return fail(self);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let client_id = u16::from_be_bytes([msg[0], msg[1]]);
        let mut out = msg.to_vec();
        out[..2].copy_from_slice(&id.to_be_bytes());
        if self.upstream_sock.send_to(&out, server).is_ok() {
            self.pending.insert(id, (client_id, from, now));
        } else {
            fail(self);
        }
    }

    /// Hand the upstream's answers back to the clients that asked.
    pub fn on_answer(&mut self) {
        let mut buf = [0u8; MAX_MESSAGE];
        while let Ok((n, from)) = self.upstream_sock.recv_from(&mut buf) {
            if n < 12 || !self.upstream.contains(&from) {
                continue;
            }
            let id = u16::from_be_bytes([buf[0], buf[1]]);
            let Some((client_id, client, _)) = self.pending.remove(&id) else {
                continue;
            };
            buf[..2].copy_from_slice(&client_id.to_be_bytes());
            let _ = self.listen.send_to(&buf[..n], client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in name.split('.') {
            m.push(l.len() as u8);
            m.extend_from_slice(l.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m
    }

    #[test]
    fn questions_are_read_and_answers_point_back_at_them() {
        let m = query("DB.Example", 1);
        let q = question(&m).unwrap();
        assert_eq!(
            (q.name.as_str(), q.qtype, q.qclass, q.end),
            ("db.example", 1, 1, m.len())
        );
        let a = answer(&m, &q, &["10.89.0.2".parse().unwrap()], 0);
        assert_eq!(&a[..2], &[0x12, 0x34]);
        assert_eq!(a[2] & 0x80, 0x80, "a response");
        assert_eq!(a[2] & 0x01, 0x01, "RD kept");
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 1, "one answer");
        assert_eq!(&a[m.len()..m.len() + 2], &[0xc0, 0x0c]);
        assert_eq!(&a[a.len() - 4..], &[10, 89, 0, 2]);
        let nx = answer(&m, &q, &[], 3);
        assert_eq!(nx[3] & 0x0f, 3);
        // Responses, several questions, truncated messages: not read.
        let mut r = m.clone();
        r[2] |= 0x80;
        assert!(question(&r).is_none());
        assert!(question(&m[..m.len() - 1]).is_none());
        assert!(question(&[0; 5]).is_none());
    }

    #[test]
    fn hosts_names_resolve_case_blind_and_unknown_ones_do_not() {
        let hosts = "127.0.0.1\tlocalhost\n10.89.0.3\tweb\n# pods on network n\n\
                     10.89.0.2\tdb database db-1\nfd00::2\tdb\n";
        assert_eq!(
            lookup(hosts, "DATABASE").unwrap(),
            vec!["10.89.0.2".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(lookup(hosts, "db").unwrap().len(), 2);
        assert!(lookup(hosts, "pods").is_none());
        assert!(lookup(hosts, "nowhere").is_none());
    }
}
