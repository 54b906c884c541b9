//! Regexes over the records of a reply's sections (answer, authority, additional), each record
//! in its presentation format, as zone files and `dig` show it (and as blackbox_exporter's
//! `validate_answer_rrs` sees it): `NAME\tTTL\tCLASS\tTYPE\tRDATA`, the name absolute with its
//! trailing dot, e.g. `www.test.\t300\tIN\tA\t10.0.0.5` or `test.\t300\tIN\tMX\t10 mail.test.`.
//!
//! Unlike `answers` (values among the answers of the asked type), these see every record of the
//! section, CNAMEs on the way and other types included, so that a module can say "no record
//! points to 10.0.0.9" or "every answer is in 10.0.0.0/24".

use std::fmt::Write as _;

use hickory_resolver::proto::rr::{Name, RData, Record};
use regex::Regex;

/// The four tests over one section's records; all must hold. Empty by default.
#[derive(Clone, Debug, Default)]
pub struct SectionRules {
    /// No record may match any of these.
    pub none_match: Vec<Regex>,
    /// Not every record may match each of these (no records at all: every one does).
    pub not_all_match: Vec<Regex>,
    /// Every record must match each of these, and there must be records.
    pub all_match: Vec<Regex>,
    /// Some record must match each of these.
    pub some_match: Vec<Regex>,
}

impl PartialEq for SectionRules {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &[Regex], b: &[Regex]| {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.as_str() == b.as_str())
        };
        same(&self.none_match, &other.none_match)
            && same(&self.not_all_match, &other.not_all_match)
            && same(&self.all_match, &other.all_match)
            && same(&self.some_match, &other.some_match)
    }
}

impl SectionRules {
    /// Whether nothing is checked.
    pub fn is_empty(&self) -> bool {
        self.none_match.is_empty()
            && self.not_all_match.is_empty()
            && self.all_match.is_empty()
            && self.some_match.is_empty()
    }

    /// `Ok` when every test holds over `records` (their presentation text); otherwise what did
    /// not, for the failure's detail.
    pub(crate) fn check(&self, records: &[String]) -> Result<(), String> {
        let shown = |re: &Regex| format!("/{}/", re.as_str());
        for re in &self.none_match {
            if let Some(record) = records.iter().find(|r| re.is_match(r)) {
                return Err(format!("{record:?} matches {}", shown(re)));
            }
        }
        for re in &self.not_all_match {
            if records.iter().all(|r| re.is_match(r)) {
                return Err(format!("every record matches {}", shown(re)));
            }
        }
        for re in &self.all_match {
            if records.is_empty() {
                return Err(format!("no record to match {}", shown(re)));
            }
            if let Some(record) = records.iter().find(|r| !re.is_match(r)) {
                return Err(format!("{record:?} does not match {}", shown(re)));
            }
        }
        for re in &self.some_match {
            if !records.iter().any(|r| re.is_match(r)) {
                return Err(format!("no record matches {}", shown(re)));
            }
        }
        Ok(())
    }
}

/// The rules of each section of a reply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordRules {
    /// Over the answer section.
    pub answer: SectionRules,
    /// Over the authority section.
    pub authority: SectionRules,
    /// Over the additional section.
    pub additional: SectionRules,
}

impl RecordRules {
    /// Whether nothing is checked.
    pub fn is_empty(&self) -> bool {
        self.answer.is_empty() && self.authority.is_empty() && self.additional.is_empty()
    }

    /// `Ok` when every section's rules hold; otherwise which section failed and why.
    pub(crate) fn check(
        &self,
        answer: &[Record],
        authority: &[Record],
        additional: &[Record],
    ) -> Result<(), String> {
        for (name, rules, records) in [
            ("answer", &self.answer, answer),
            ("authority", &self.authority, authority),
            ("additional", &self.additional, additional),
        ] {
            if rules.is_empty() {
                continue;
            }
            let texts: Vec<String> = records.iter().map(presentation).collect();
            rules
                .check(&texts)
                .map_err(|why| format!("{name} section: {why}"))?;
        }
        Ok(())
    }
}

/// A record in presentation format, fields separated by tabs.
pub(crate) fn presentation(record: &Record) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{}",
        absolute(&record.name),
        record.ttl,
        record.dns_class,
        record.record_type(),
        rdata(&record.data)
    )
}

fn absolute(name: &Name) -> String {
    let text = name.to_ascii();
    if text.ends_with('.') {
        text
    } else {
        format!("{text}.")
    }
}

fn rdata(data: &RData) -> String {
    match data {
        RData::A(a) => a.0.to_string(),
        RData::AAAA(aaaa) => aaaa.0.to_string(),
        RData::CNAME(name) => absolute(&name.0),
        RData::NS(name) => absolute(&name.0),
        RData::PTR(name) => absolute(&name.0),
        RData::MX(mx) => format!("{} {}", mx.preference, absolute(&mx.exchange)),
        RData::TXT(txt) => {
            let mut text = String::new();
            for (i, part) in txt.txt_data.iter().enumerate() {
                if i > 0 {
                    text.push(' ');
                }
                text.push('"');
                for c in String::from_utf8_lossy(part).chars() {
                    if matches!(c, '"' | '\\') {
                        text.push('\\');
                    }
                    text.push(c);
                }
                text.push('"');
            }
            text
        }
        RData::SRV(srv) => format!(
            "{} {} {} {}",
            srv.priority,
            srv.weight,
            srv.port,
            absolute(&srv.target)
        ),
        RData::SOA(soa) => {
            let mut text = format!("{} {}", absolute(&soa.mname), absolute(&soa.rname));
            let _ = write!(
                text,
                " {} {} {} {} {}",
                soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum
            );
            text
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_resolver::proto::rr::rdata::{A, MX, TXT};

    use super::*;

    fn record(name: &str, data: RData) -> Record {
        Record::from_rdata(Name::from_ascii(name).unwrap(), 300, data)
    }

    #[test]
    fn records_read_as_zone_files_show_them() {
        let a = record("www.test.", RData::A(A(Ipv4Addr::new(10, 0, 0, 5))));
        assert_eq!(presentation(&a), "www.test.\t300\tIN\tA\t10.0.0.5");
        let mx = record(
            "test.",
            RData::MX(MX::new(10, Name::from_ascii("mail.test.").unwrap())),
        );
        assert_eq!(presentation(&mx), "test.\t300\tIN\tMX\t10 mail.test.");
        let txt = record(
            "test.",
            RData::TXT(TXT::new(vec!["a \"b\"".into(), "c".into()])),
        );
        assert_eq!(
            presentation(&txt),
            "test.\t300\tIN\tTXT\t\"a \\\"b\\\"\" \"c\""
        );
    }

    #[test]
    fn the_four_tests_hold_as_their_names_say() {
        let re = |s: &str| Regex::new(s).unwrap();
        let records = vec![
            "a.\t1\tIN\tA\t10.0.0.5".to_owned(),
            "a.\t1\tIN\tA\t10.0.0.6".to_owned(),
        ];
        let rules = SectionRules {
            none_match: vec![re("10\\.0\\.0\\.9")],
            not_all_match: vec![re("\\.5$")],
            all_match: vec![re("^a\\.")],
            some_match: vec![re("\\.6$")],
        };
        assert_eq!(rules.check(&records), Ok(()));
        let none = SectionRules {
            none_match: vec![re("\\.6$")],
            ..SectionRules::default()
        };
        assert!(
            none.check(&records)
                .unwrap_err()
                .contains("matches /\\.6$/")
        );
        let all = SectionRules {
            all_match: vec![re(".")],
            ..SectionRules::default()
        };
        assert_eq!(all.check(&[]).unwrap_err(), "no record to match /./");
        let not_all = SectionRules {
            not_all_match: vec![re("IN")],
            ..SectionRules::default()
        };
        assert!(not_all.check(&records).is_err());
        assert!(not_all.check(&[]).is_err());
        let some = SectionRules {
            some_match: vec![re("\\.7$")],
            ..SectionRules::default()
        };
        assert_eq!(
            some.check(&records).unwrap_err(),
            "no record matches /\\.7$/"
        );
        assert!(SectionRules::default().check(&[]).is_ok());
    }
}
