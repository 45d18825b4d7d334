//! Where a connector may be reached (SPEC §6, §9): an install's URL is
//! `https://` to a public address; with `ALLOW_LOOPBACK_CONNECTORS` (local
//! runs only; the template never sets it) also `http://` or `https://` to
//! 127.0.0.0/8, `::1` or `localhost`.
//!
//! Two checks, one rule: [`check_url`] on the URL's form (webhook intake
//! answers 400), and [`Endpoint::admits`] on every address the host resolves
//! to, when connecting (the adapter then connects to that checked address
//! only, so DNS cannot swap it afterwards). [`classify`] says what an IP
//! address is; everything that is not a global unicast address is refused:
//! loopback, private (RFC 1918, `fc00::/7`), shared (`100.64.0.0/10`),
//! link-local, cloud metadata (`169.254.169.254`, `fd00:ec2::254`),
//! unspecified, multicast, broadcast, documentation, benchmarking and
//! reserved ranges. IPv6 forms that embed an IPv4 address (mapped,
//! compatible, NAT64, 6to4) are judged by the address they embed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// What the deployment allows besides public `https://`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointPolicy {
    /// `ALLOW_LOOPBACK_CONNECTORS`: loopback servers, for local runs only.
    pub allow_loopback: bool,
}

/// What kind of address an IP address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    Loopback,
    Private,
    Shared,
    LinkLocal,
    Metadata,
    Unspecified,
    Multicast,
    Broadcast,
    Documentation,
    Benchmarking,
    Reserved,
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private address",
            AddressClass::Shared => "a shared (carrier-grade NAT) address",
            AddressClass::LinkLocal => "a link-local address",
            AddressClass::Metadata => "a cloud metadata address",
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::Multicast => "a multicast address",
            AddressClass::Broadcast => "the broadcast address",
            AddressClass::Documentation => "a documentation address",
            AddressClass::Benchmarking => "a benchmarking address",
            AddressClass::Reserved => "a reserved address",
        })
    }
}

/// The longest install URL taken (it is stored on the install item).
pub const MAX_URL_LENGTH: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("the install URL is not a URL: {0}")]
    Unparsable(String),
    #[error("the install URL is longer than {MAX_URL_LENGTH} characters")]
    TooLong,
    #[error("the install URL must be https:// (http:// only to a loopback server, with ALLOW_LOOPBACK_CONNECTORS)")]
    Scheme,
    #[error("the install URL must not carry a user name or password")]
    Userinfo,
    #[error("the install URL has no host")]
    NoHost,
    #[error("the connector host `{0}` is a loopback name; only ALLOW_LOOPBACK_CONNECTORS allows it")]
    LoopbackName(String),
    #[error("the connector address {address} is {class}, not a public address")]
    Address { address: IpAddr, class: AddressClass },
    #[error("the connector host `{0}` resolved to no address")]
    Unresolved(String),
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    use AddressClass::*;
    const TABLE: [([u8; 4], u32, AddressClass); 19] = [
        ([169, 254, 169, 254], 32, Metadata),
        ([255, 255, 255, 255], 32, Broadcast),
        ([0, 0, 0, 0], 8, Unspecified),
        ([10, 0, 0, 0], 8, Private),
        ([100, 64, 0, 0], 10, Shared),
        ([127, 0, 0, 0], 8, Loopback),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([172, 16, 0, 0], 12, Private),
        ([192, 0, 0, 0], 24, Reserved),
        ([192, 0, 2, 0], 24, Documentation),
        ([192, 31, 196, 0], 24, Reserved),
        ([192, 52, 193, 0], 24, Reserved),
        ([192, 88, 99, 0], 24, Reserved),
        ([192, 168, 0, 0], 16, Private),
        ([198, 18, 0, 0], 15, Benchmarking),
        ([198, 51, 100, 0], 24, Documentation),
        ([203, 0, 113, 0], 24, Documentation),
        ([224, 0, 0, 0], 4, Multicast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    TABLE
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map_or(Public, |(_, _, class)| *class)
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    use AddressClass::*;
    let segments = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if ip == Ipv6Addr::UNSPECIFIED {
        return Unspecified;
    }
    if ip == Ipv6Addr::LOCALHOST {
        return Loopback;
    }
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and the
    // NAT64 well-known prefix (64:ff9b::/96) reach the IPv4 address inside.
    if in_v6(ip, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96)
        || in_v6(ip, [0; 8], 96)
        || in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96)
    {
        return classify_v4(embedded(segments[6], segments[7]));
    }
    // 6to4 (2002::/16) embeds the IPv4 address in bits 16..48.
    if segments[0] == 0x2002 {
        return classify_v4(embedded(segments[1], segments[2]));
    }
    const TABLE: [([u16; 8], u32, AddressClass); 11] = [
        ([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128, Metadata),
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Private),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Reserved),
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Documentation),
        ([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48, Benchmarking),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, Reserved),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Documentation),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, Private),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Private),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Multicast),
    ];
    if let Some((_, _, class)) = TABLE.iter().find(|(net, prefix, _)| in_v6(ip, *net, *prefix)) {
        return *class;
    }
    // Only global unicast (2000::/3) is public; the rest is unassigned.
    if in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        Public
    } else {
        Reserved
    }
}

/// What `ip` is.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// A connector URL whose form passed [`check_url`]: what to resolve, and
/// which of the resolved addresses to admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub url: Url,
    /// The host to resolve (a name), or `None` when the URL names an address.
    pub name: Option<String>,
    /// The address the URL names, when it names one.
    pub address: Option<IpAddr>,
    pub port: u16,
    plain_http: bool,
    policy: EndpointPolicy,
}

fn is_loopback_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// Checks a connector URL's form (webhook intake): scheme, no user info, a
/// host that is not a loopback name (unless allowed), and, when the host is
/// an address, the address rule.
pub fn check_url(text: &str, policy: EndpointPolicy) -> Result<Endpoint, EndpointError> {
    endpoint(text, policy, true)
}

/// The same rule when connecting: a name is judged by what it resolves to
/// ([`Endpoint::pick`]), whatever it is called.
pub fn connect_endpoint(text: &str, policy: EndpointPolicy) -> Result<Endpoint, EndpointError> {
    endpoint(text, policy, false)
}

fn endpoint(text: &str, policy: EndpointPolicy, judge_names: bool) -> Result<Endpoint, EndpointError> {
    if text.len() > MAX_URL_LENGTH {
        return Err(EndpointError::TooLong);
    }
    let url = Url::parse(text).map_err(|e| EndpointError::Unparsable(e.to_string()))?;
    let plain_http = match url.scheme() {
        "https" => false,
        "http" if policy.allow_loopback => true,
        _ => return Err(EndpointError::Scheme),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(EndpointError::Userinfo);
    }
    let port = url.port_or_known_default().ok_or(EndpointError::NoHost)?;
    let (name, address) = match url.host() {
        None => return Err(EndpointError::NoHost),
        Some(Host::Domain(domain)) => {
            if judge_names && is_loopback_name(domain) && !policy.allow_loopback {
                return Err(EndpointError::LoopbackName(domain.to_owned()));
            }
            (Some(domain.to_owned()), None)
        }
        Some(Host::Ipv4(v4)) => (None, Some(IpAddr::V4(v4))),
        Some(Host::Ipv6(v6)) => (None, Some(IpAddr::V6(v6))),
    };
    let endpoint = Endpoint {
        url,
        name,
        address,
        port,
        plain_http,
        policy,
    };
    if let Some(address) = endpoint.address {
        endpoint.admits(address)?;
    }
    Ok(endpoint)
}

impl Endpoint {
    /// Whether a connection to `address` (the URL's, or one its name
    /// resolved to) is allowed.
    pub fn admits(&self, address: IpAddr) -> Result<(), EndpointError> {
        let class = classify(address);
        let allowed = match class {
            AddressClass::Public => !self.plain_http,
            AddressClass::Loopback => self.policy.allow_loopback,
            _ => false,
        };
        if allowed {
            Ok(())
        } else if self.plain_http && class == AddressClass::Public {
            Err(EndpointError::Scheme)
        } else {
            Err(EndpointError::Address { address, class })
        }
    }

    /// The first admitted address among those a name resolved to; any
    /// refused one refuses the endpoint (a name that answers a private
    /// address among public ones is not trusted with any).
    pub fn pick(&self, resolved: &[IpAddr]) -> Result<IpAddr, EndpointError> {
        for address in resolved {
            self.admits(*address)?;
        }
        resolved
            .first()
            .copied()
            .ok_or_else(|| EndpointError::Unresolved(self.name.clone().unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: EndpointPolicy = EndpointPolicy { allow_loopback: false };
    const ON: EndpointPolicy = EndpointPolicy { allow_loopback: true };

    fn class(text: &str) -> AddressClass {
        classify(text.parse().unwrap())
    }

    #[test]
    fn every_range_is_classified() {
        use AddressClass::*;
        for (address, expected) in [
            ("8.8.8.8", Public),
            ("1.1.1.1", Public),
            ("93.184.216.34", Public),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.1", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("172.32.0.1", Public),
            ("192.168.1.1", Private),
            ("100.64.0.1", Shared),
            ("100.127.255.255", Shared),
            ("100.128.0.1", Public),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", LinkLocal),
            ("169.254.0.1", LinkLocal),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("192.0.0.8", Reserved),
            ("192.0.2.1", Documentation),
            ("198.51.100.7", Documentation),
            ("203.0.113.9", Documentation),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
            ("192.88.99.1", Reserved),
            ("::", Unspecified),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:169.254.169.254", Metadata),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:8.8.8.8", Public),
            ("::127.0.0.1", Loopback),
            ("64:ff9b::169.254.169.254", Metadata),
            ("64:ff9b::7f00:1", Loopback),
            ("64:ff9b::8.8.8.8", Public),
            ("64:ff9b:1::1", Private),
            ("2002:7f00:1::", Loopback),
            ("2002:a9fe:a9fe::1", Metadata),
            ("2002:0808:0808::1", Public),
            ("fd00:ec2::254", Metadata),
            ("fd00::1", Private),
            ("fc00::1", Private),
            ("fe80::1", LinkLocal),
            ("fec0::1", Private),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("2001::1", Reserved),
            ("2001:2::1", Benchmarking),
            ("100::1", Reserved),
            ("4000::1", Reserved),
            ("2606:4700:4700::1111", Public),
            ("2a00:1450:4001::1", Public),
        ] {
            assert_eq!(class(address), expected, "{address}");
        }
    }

    #[test]
    fn only_public_https_passes_without_the_flag() {
        assert!(check_url("https://mcp.example.com/mcp", OFF).is_ok());
        assert!(check_url("https://8.8.8.8/mcp", OFF).is_ok());
        assert!(check_url("https://[2606:4700:4700::1111]:8443/mcp", OFF).is_ok());
        for (url, expected) in [
            ("http://mcp.example.com/mcp", EndpointError::Scheme),
            ("ftp://mcp.example.com/", EndpointError::Scheme),
            ("file:///etc/passwd", EndpointError::Scheme),
            ("https://user:pw@mcp.example.com/", EndpointError::Userinfo),
            ("https://localhost/mcp", EndpointError::LoopbackName("localhost".into())),
            (
                "https://api.localhost./mcp",
                EndpointError::LoopbackName("api.localhost.".into()),
            ),
        ] {
            assert_eq!(check_url(url, OFF).unwrap_err(), expected, "{url}");
        }
        for url in [
            "https://127.0.0.1/mcp",
            "https://169.254.169.254/latest/meta-data/",
            "https://10.0.0.5/mcp",
            "https://[::1]/mcp",
            "https://[fd00:ec2::254]/",
            "https://[::ffff:169.254.169.254]/",
            "https://100.64.1.1/",
            "https://0.0.0.0/",
            // Other spellings of an address: the URL parser normalises them.
            "https://2130706433/mcp",
            "https://0x7f.1/mcp",
            "https://0177.0.0.1/mcp",
        ] {
            assert!(
                matches!(check_url(url, OFF), Err(EndpointError::Address { .. })),
                "{url}: {:?}",
                check_url(url, OFF)
            );
        }
        assert!(matches!(check_url("not a url", OFF), Err(EndpointError::Unparsable(_))));
        let long = format!("https://mcp.example.com/{}", "a".repeat(MAX_URL_LENGTH));
        assert_eq!(check_url(&long, OFF), Err(EndpointError::TooLong));
    }

    #[test]
    fn the_flag_allows_loopback_and_nothing_else() {
        assert!(check_url("http://127.0.0.1:8080/mcp", ON).is_ok());
        assert!(check_url("http://localhost:8080/mcp", ON).is_ok());
        assert!(check_url("http://[::1]:8080/mcp", ON).is_ok());
        assert!(check_url("https://mcp.example.com/mcp", ON).is_ok());
        assert!(matches!(
            check_url("http://10.0.0.1/mcp", ON),
            Err(EndpointError::Address { .. })
        ));
        assert_eq!(
            check_url("http://8.8.8.8/mcp", ON).unwrap_err(),
            EndpointError::Scheme,
            "plain http only to loopback"
        );
        // A name checked at connect time: http only if it resolves to loopback.
        let named = check_url("http://localhost:8080/mcp", ON).unwrap();
        assert!(named.pick(&["127.0.0.1".parse().unwrap()]).is_ok());
        assert_eq!(named.pick(&["8.8.8.8".parse().unwrap()]), Err(EndpointError::Scheme));
    }

    #[test]
    fn at_connect_time_a_name_is_judged_by_its_addresses() {
        let endpoint = connect_endpoint("https://localhost:8443/mcp", OFF).unwrap();
        assert_eq!(endpoint.name.as_deref(), Some("localhost"));
        assert_eq!(endpoint.port, 8443);
        assert!(matches!(
            endpoint.pick(&["127.0.0.1".parse().unwrap()]),
            Err(EndpointError::Address {
                class: AddressClass::Loopback,
                ..
            })
        ));
        assert!(connect_endpoint("http://mcp.example.com/", OFF).is_err());
        assert!(connect_endpoint("https://127.0.0.1/", OFF).is_err());
    }

    #[test]
    fn resolved_addresses_are_checked_all_of_them() {
        let endpoint = check_url("https://mcp.example.com/mcp", OFF).unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        assert_eq!(endpoint.pick(&[public]), Ok(public));
        for bad in ["127.0.0.1", "169.254.169.254", "10.1.1.1", "::1", "fd00:ec2::254"] {
            let bad: IpAddr = bad.parse().unwrap();
            assert!(
                matches!(endpoint.pick(&[public, bad]), Err(EndpointError::Address { .. })),
                "{bad}"
            );
        }
        assert!(matches!(endpoint.pick(&[]), Err(EndpointError::Unresolved(_))));
        let flagged = check_url("https://mcp.example.com/mcp", ON).unwrap();
        assert!(flagged.pick(&["127.0.0.1".parse().unwrap()]).is_ok());
        assert!(flagged.pick(&["192.168.0.1".parse().unwrap()]).is_err());
    }
}
