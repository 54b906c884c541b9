//! A certificate's distinguished name as text, the way Go's `crypto/x509` writes it
//! (`pkix.Name.String`): the most specific attribute first (`CN=api.internal,O=Acme,C=US`),
//! which is also the RFC 4514 order that `openssl x509 -nameopt RFC2253` prints.
//!
//! Go's form, not just any: blackbox_exporter puts it in the `subject` and `issuer` labels of
//! `probe_ssl_last_chain_info`, so a dashboard or alert that matches on them keeps matching,
//! and the refusals and the API name a certificate the way the exporter's users read it.
//!
//! Go does not keep the certificate's order. It reads the attributes it knows into fields and
//! writes them back in a fixed order (serial number, common name, organisational units,
//! organisations, postal code, street, locality, province, country); the attributes it does not
//! know (an e-mail address) come last, as `OID=#` and the hex of their DER encoding.

use std::fmt::Write as _;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::x509::X509Name;

/// A certificate's subject alternative names: none when it has no such extension, or one that
/// cannot be read (a verifier refuses that certificate anyway).
pub(super) fn alt_names<'a>(cert: &'a X509Certificate<'a>) -> &'a [GeneralName<'a>] {
    match cert.subject_alternative_name() {
        Ok(Some(san)) => &san.value.general_names,
        _ => &[],
    }
}

/// The attributes Go reads into fields, in the order it writes them, with their short names.
const KNOWN: [(&str, &str); 9] = [
    ("2.5.4.5", "SERIALNUMBER"),
    ("2.5.4.3", "CN"),
    ("2.5.4.11", "OU"),
    ("2.5.4.10", "O"),
    ("2.5.4.17", "POSTALCODE"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.6", "C"),
];

/// `name` as Go's `pkix.Name.String` writes it.
pub(crate) fn go_form(name: &X509Name<'_>) -> String {
    let attributes: Vec<(String, Option<&str>, &[u8], u32)> = name
        .iter_attributes()
        .map(|atv| {
            let value = atv.attr_value();
            (
                atv.attr_type().to_id_string(),
                atv.as_str().ok(),
                value.data,
                value.header.tag().0,
            )
        })
        .collect();
    let mut parts: Vec<String> = Vec::new();
    for (oid, short) in KNOWN {
        let mut values = attributes
            .iter()
            .filter(|(o, value, ..)| *o == oid && value.is_some())
            .filter_map(|(_, value, ..)| *value);
        // Go keeps one common name and one serial number: the last given.
        let values: Vec<&str> = if matches!(short, "CN" | "SERIALNUMBER") {
            values.next_back().into_iter().collect()
        } else {
            // A field's values are one multi-valued RDN, written in their order.
            values.collect()
        };
        if values.is_empty() {
            continue;
        }
        let rdn: Vec<String> = values
            .iter()
            .map(|v| format!("{short}={}", escape(v)))
            .collect();
        parts.push(rdn.join("+"));
    }
    // The others, each its own RDN, written last and in reverse.
    for (oid, value, data, tag) in attributes.iter().rev() {
        if KNOWN.iter().any(|(known, _)| known == oid) {
            continue;
        }
        let der = match value {
            Some(text) => remarshalled(text),
            None => encoded(u8::try_from(*tag).unwrap_or(0), data),
        };
        let mut hex = String::with_capacity(der.len() * 2);
        for byte in der {
            let _ = write!(hex, "{byte:02x}");
        }
        parts.push(format!("{oid}=#{hex}"));
    }
    parts.join(",")
}

/// RFC 2253's escapes, as Go applies them: `,+"\<>;` anywhere, a space at either end, a `#`
/// at the start.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.len().saturating_sub(1);
    for (at, c) in value.char_indices() {
        let special = match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' => true,
            ' ' => at == 0 || at == last,
            '#' => at == 0,
            _ => false,
        };
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A text value encoded again as Go's `asn1.Marshal` encodes a string: a PrintableString when
/// every character is one, else a UTF8String.
fn remarshalled(text: &str) -> Vec<u8> {
    let printable = text.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b' ' | b'\'' | b'(' | b')' | b'+' | b',' | b'-' | b'.' | b'/' | b':' | b'=' | b'?'
            )
    });
    encoded(if printable { 0x13 } else { 0x0c }, text.as_bytes())
}

/// A primitive universal DER element: its tag, its length, its content.
fn encoded(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(der: &[u8]) -> String {
        let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
        go_form(cert.subject())
    }

    #[test]
    fn attributes_are_written_in_gos_order_whatever_the_certificates() {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_owned()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        // Least specific first, as certificates usually list them; then an odd order.
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::CommonName, "api, the \"main\" one");
        dn.push(rcgen::DnType::OrganizationName, "Acme");
        dn.push(rcgen::DnType::LocalityName, " Springfield");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            name_of(cert.der()),
            r#"CN=api\, the \"main\" one,O=Acme,L=\ Springfield,C=US"#
        );
    }

    #[test]
    fn unknown_attributes_come_last_as_hex_der() {
        // An e-mail address has an `@`, which no PrintableString holds: a UTF8String (0x0c).
        assert_eq!(remarshalled("a@b"), [0x0c, 3, b'a', b'@', b'b']);
        assert_eq!(remarshalled("ab"), [0x13, 2, b'a', b'b']);
        let long = "x".repeat(200);
        assert_eq!(&remarshalled(&long)[..3], &[0x13, 0x81, 200]);
    }
}
