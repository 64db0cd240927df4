//! Plugin results: kept as the JSON the plugin printed (handed to the next plugin as
//! prevResult and cached verbatim, as libcni does) and converted to an [`Attachment`]
//! for the engine. Results of 0.3.x, 0.4.0 and 1.x plugins share one shape (0.3/0.4 add
//! an `ips[].version` field that is ignored); 0.1.0/0.2.0 results (`ip4`/`ip6` objects)
//! are converted.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::ipnet::IpNet;
use crate::types::{Attachment, Dns, IpConfig, RouteConfig};

/// Convert a result to an attachment of network `network`.
pub fn to_attachment(network: &str, result: &Value) -> Result<Attachment> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::Invalid(format!("network {network}: unreadable CNI result: {e}"))
    };
    let mut att: Attachment = if result.get("ip4").is_some() || result.get("ip6").is_some() {
        legacy(result).map_err(|e| bad(&e))?
    } else {
        serde_json::from_value(result.clone()).map_err(|e| bad(&e))?
    };
    att.network = network.to_string();
    Ok(att)
}

/// A 0.1.0/0.2.0 result: {"ip4": {"ip": CIDR, "gateway", "routes"}, "ip6": ..., "dns"}.
fn legacy(result: &Value) -> Result<Attachment> {
    let mut att = Attachment::default();
    for key in ["ip4", "ip6"] {
        let Some(ipc) = result.get(key) else { continue };
        let ip: IpNet = serde_json::from_value(ipc["ip"].clone())
            .map_err(|e| Error::Invalid(format!("{key}.ip: {e}")))?;
        let gateway = ipc
            .get("gateway")
            .and_then(Value::as_str)
            .and_then(|g| g.parse().ok());
        att.ips.push(IpConfig {
            address: ip,
            gateway,
            interface: None,
        });
        if let Some(routes) = ipc.get("routes") {
            let routes: Vec<RouteConfig> = serde_json::from_value(routes.clone())
                .map_err(|e| Error::Invalid(format!("{key}.routes: {e}")))?;
            att.routes.extend(routes);
        }
    }
    if let Some(dns) = result.get("dns") {
        att.dns = serde_json::from_value::<Dns>(dns.clone()).unwrap_or_default();
    }
    Ok(att)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_of_every_supported_version_convert() {
        let v040 = serde_json::json!({"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],
            "ips":[{"version":"4","address":"10.1.0.2/24","gateway":"10.1.0.1","interface":0}],
            "routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}]});
        let a = to_attachment("n", &v040).unwrap();
        assert_eq!(a.network, "n");
        assert_eq!(a.primary_ip().unwrap().to_string(), "10.1.0.2");
        assert_eq!(a.ips[0].interface, Some(0));
        let v020 = serde_json::json!({"cniVersion":"0.2.0","ip4":{"ip":"10.2.0.2/16","gateway":"10.2.0.1",
            "routes":[{"dst":"0.0.0.0/0"}]},"dns":{"nameservers":["10.2.0.1"]}});
        let a = to_attachment("n", &v020).unwrap();
        assert_eq!(a.ips[0].address.to_string(), "10.2.0.2/16");
        assert_eq!(a.routes.len(), 1);
        assert_eq!(a.dns.nameservers.len(), 1);
        let broken = serde_json::json!({"ips":[{"address":"not-an-ip"}]});
        let e = to_attachment("n", &broken).unwrap_err();
        assert!(e.to_string().contains("network n"), "{e}");
    }
}
