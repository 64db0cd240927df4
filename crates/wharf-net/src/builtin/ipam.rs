//! Address leases on disk for the built-in network: one file per leased address, named by
//! the address and holding the owning pod's id, plus the last address handed out per
//! family (so addresses are reused round-robin, not immediately). A lease file is written
//! unnamed (O_TMPFILE) and linked into place only when complete, failing if the address is
//! taken: a lease exists exactly when its file does, and a process killed midway leaves no
//! lease without an owner. Callers hold the network's lock.

use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::{Context, Error, Result};
use crate::ipnet::IpNet;
use crate::sys;

/// The lease directory of one network.
pub struct Ipam {
    dir: PathBuf,
}

impl Ipam {
    /// Leases kept in `dir`.
    pub fn new(dir: PathBuf) -> Ipam {
        Ipam { dir }
    }

    fn lease_path(&self, ip: &IpAddr) -> PathBuf {
        self.dir.join(ip.to_string())
    }

    fn last_path(&self, v6: bool) -> PathBuf {
        self.dir.join(if v6 {
            "last_reserved.v6"
        } else {
            "last_reserved.v4"
        })
    }

    /// Lease `ip` to `owner` if it is free. Ok(false) if someone holds it.
    fn try_lease(&self, ip: &IpAddr, owner: &str) -> Result<bool> {
        let path = self.lease_path(ip);
        if let Some(taken) = sys::create_complete(&self.dir, &path, owner.as_bytes())
            .map_err(|e| Error::os(format!("create lease {}", path.display()), e))?
        {
            return Ok(taken);
        }
        // No O_TMPFILE on this filesystem: an exclusive create, then the owner.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                if let Err(e) = f.write_all(owner.as_bytes()) {
                    let _ = std::fs::remove_file(&path);
                    return Err(Error::os(format!("write lease {}", path.display()), e));
                }
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::os(format!("create lease {}", path.display()), e)),
        }
    }

    /// Lease a specific address (a pod asking for its IP).
    pub fn lease_exact(
        &self,
        subnet: &IpNet,
        reserved: &[IpAddr],
        ip: IpAddr,
        owner: &str,
    ) -> Result<IpAddr> {
        let (lo, hi) = subnet.host_range();
        let usable = subnet.offset_of(&ip).is_some_and(|o| o >= lo && o <= hi);
        if !usable || reserved.contains(&ip) {
            return Err(Error::Invalid(format!(
                "requested address {ip} is not a usable address of subnet {}",
                subnet.trunc()
            )));
        }
        std::fs::create_dir_all(&self.dir).ctx(|| format!("create {}", self.dir.display()))?;
        if self.try_lease(&ip, owner)? {
            Ok(ip)
        } else {
            Err(Error::Conflict(format!(
                "requested address {ip} is already leased to pod {}",
                self.owner_of(&ip).unwrap_or_default()
            )))
        }
    }

    /// Lease the next free address of `subnet` after the last one handed out, skipping
    /// `reserved` (the gateway).
    pub fn lease_next(&self, subnet: &IpNet, reserved: &[IpAddr], owner: &str) -> Result<IpAddr> {
        std::fs::create_dir_all(&self.dir).ctx(|| format!("create {}", self.dir.display()))?;
        let (lo, hi) = subnet.host_range();
        let count = hi - lo + 1;
        let last = std::fs::read_to_string(self.last_path(subnet.is_ipv6()))
            .ok()
            .and_then(|s| s.trim().parse::<IpAddr>().ok())
            .and_then(|ip| subnet.offset_of(&ip))
            .filter(|o| *o >= lo && *o <= hi)
            .unwrap_or(hi);
        // Walk at most the whole range (capped: an IPv6 /64 is never walked to its end).
        let limit = count.min(1 << 20);
        for i in 1..=limit {
            let off = lo + (last - lo + i) % count;
            let ip = subnet.nth(off).expect("offset inside the subnet");
            if reserved.contains(&ip) {
                continue;
            }
            if self.try_lease(&ip, owner)? {
                let last = self.last_path(subnet.is_ipv6());
                sys::remove_stale_temps(&last);
                sys::write_atomic(&last, ip.to_string().as_bytes(), 0o644)?;
                return Ok(ip);
            }
        }
        Err(Error::Exhausted(format!(
            "no free address left in subnet {}",
            subnet.trunc()
        )))
    }

    /// Who holds `ip`.
    pub fn owner_of(&self, ip: &IpAddr) -> Option<String> {
        std::fs::read_to_string(self.lease_path(ip)).ok()
    }

    /// Release `ip` if `owner` holds it (never someone else's lease). Idempotent.
    pub fn release(&self, ip: &IpAddr, owner: &str) -> Result<()> {
        if self.owner_of(ip).as_deref() == Some(owner) {
            sys::remove_file_if_exists(&self.lease_path(ip))?;
        }
        Ok(())
    }

    /// Every lease: (address, owner).
    pub fn leases(&self) -> Result<Vec<(IpAddr, String)>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::os(format!("read {}", self.dir.display()), e)),
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name();
            let Ok(ip) = name.to_string_lossy().parse::<IpAddr>() else {
                continue;
            };
            if let Ok(owner) = std::fs::read_to_string(e.path()) {
                out.push((ip, owner));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Release every lease held by `owner` (for teardown without a pod record).
    pub fn release_all_of(&self, owner: &str) -> Result<()> {
        for (ip, o) in self.leases()? {
            if o == owner {
                sys::remove_file_if_exists(&self.lease_path(&ip))?;
            }
        }
        Ok(())
    }

    /// The lease directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_exclusive_round_robin_and_released_only_by_their_owner() {
        let tmp = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(tmp.path().join("ipam"));
        let subnet: IpNet = "10.9.0.0/29".parse().unwrap(); // hosts .1-.6
        let gw: IpAddr = "10.9.0.1".parse().unwrap();
        let a = ipam.lease_next(&subnet, &[gw], "a").unwrap();
        let b = ipam.lease_next(&subnet, &[gw], "b").unwrap();
        assert_eq!(
            (a.to_string().as_str(), b.to_string().as_str()),
            ("10.9.0.2", "10.9.0.3")
        );
        ipam.release(&a, "b").unwrap();
        assert_eq!(
            ipam.owner_of(&a).as_deref(),
            Some("a"),
            "not b's to release"
        );
        ipam.release(&a, "a").unwrap();
        ipam.release(&a, "a").unwrap();
        // Round robin: .4 next, not the just-freed .2.
        assert_eq!(
            ipam.lease_next(&subnet, &[gw], "c").unwrap().to_string(),
            "10.9.0.4"
        );
        for o in ["d", "e"] {
            ipam.lease_next(&subnet, &[gw], o).unwrap();
        }
        // .2 is the only one left (wrapping around, skipping the gateway).
        assert_eq!(
            ipam.lease_next(&subnet, &[gw], "f").unwrap().to_string(),
            "10.9.0.2"
        );
        let err = ipam.lease_next(&subnet, &[gw], "g").unwrap_err();
        assert!(matches!(err, Error::Exhausted(_)), "{err}");
        assert_eq!(ipam.leases().unwrap().len(), 5);
        ipam.release_all_of("f").unwrap();
        assert_eq!(ipam.leases().unwrap().len(), 4);
    }

    #[test]
    fn crash_leftovers_are_cleaned_under_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(tmp.path().join("ipam"));
        let subnet: IpNet = "10.9.0.0/29".parse().unwrap();
        let gw: IpAddr = "10.9.0.1".parse().unwrap();
        // A lease file appears complete (written unnamed, then linked in place).
        let a = ipam.lease_next(&subnet, &[gw], "a").unwrap();
        assert_eq!(ipam.owner_of(&a).as_deref(), Some("a"));
        let names = |d: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(ipam.dir()), ["10.9.0.2", "last_reserved.v4"]);
        // What a writer of last_reserved killed before its rename left goes with the next
        // lease.
        std::fs::write(ipam.dir().join(".last_reserved.v4.tmp-999999-0"), "10.9.0").unwrap();
        ipam.lease_next(&subnet, &[gw], "b").unwrap();
        assert_eq!(
            names(ipam.dir()),
            ["10.9.0.2", "10.9.0.3", "last_reserved.v4"]
        );
        // And a pod record's leftovers go with the record.
        let records = crate::builtin::record::Records::new(tmp.path().join("pods"));
        std::fs::create_dir_all(tmp.path().join("pods")).unwrap();
        std::fs::write(tmp.path().join("pods/.p1.json.tmp-999999-3"), "{").unwrap();
        std::fs::write(tmp.path().join("pods/.p2.json.tmp-999999-4"), "{").unwrap();
        records.remove("p1").unwrap();
        assert_eq!(names(&tmp.path().join("pods")), [".p2.json.tmp-999999-4"]);
    }

    #[test]
    fn exact_leases_check_the_subnet_and_current_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(tmp.path().to_path_buf());
        let subnet: IpNet = "10.9.0.0/24".parse().unwrap();
        let gw: IpAddr = "10.9.0.1".parse().unwrap();
        let ip: IpAddr = "10.9.0.50".parse().unwrap();
        ipam.lease_exact(&subnet, &[gw], ip, "a").unwrap();
        assert!(matches!(
            ipam.lease_exact(&subnet, &[gw], ip, "b"),
            Err(Error::Conflict(_))
        ));
        for bad in ["10.9.0.1", "10.9.0.0", "10.9.0.255", "10.9.1.1"] {
            let r = ipam.lease_exact(&subnet, &[gw], bad.parse().unwrap(), "b");
            assert!(matches!(r, Err(Error::Invalid(_))), "{bad}");
        }
        let v6: IpNet = "fd00::/64".parse().unwrap();
        assert_eq!(
            ipam.lease_next(&v6, &["fd00::1".parse().unwrap()], "a")
                .unwrap()
                .to_string(),
            "fd00::2"
        );
    }
}
