//! Just enough protobuf to read the one typed request body kubectl sends that the fake must
//! understand: `kubectl auth can-i`'s SelfSubjectAccessReview (DELETE bodies are ignored).
//!
//! Layout (k8s.io/apimachinery runtime/serializer/protobuf and k8s.io/api generated.proto):
//! the magic `k8s\0`, then runtime.Unknown {1: TypeMeta, 2: raw}, raw being the
//! SelfSubjectAccessReview {2: spec {1: resourceAttributes {1 namespace, 2 verb, 3 group,
//! 4 version, 5 resource, 6 subresource, 7 name}}}.

use serde_json::{Map, Value, json};

/// Splits a message into (field number, length-delimited bytes); other wire types are skipped.
fn fields(mut buf: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    fn varint(buf: &mut &[u8]) -> Option<u64> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first()?;
            *buf = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(out);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        match key & 7 {
            0 => {
                varint(&mut buf)?;
            }
            1 => buf = buf.get(8..)?,
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let (data, rest) = (buf.get(..len)?, buf.get(len..)?);
                out.push((key >> 3, data));
                buf = rest;
            }
            5 => buf = buf.get(4..)?,
            _ => return None,
        }
    }
    Some(out)
}

fn field(buf: &[u8], number: u64) -> Option<&[u8]> {
    fields(buf)?
        .into_iter()
        .find(|(n, _)| *n == number)
        .map(|(_, d)| d)
}

/// The JSON form of a protobuf SelfSubjectAccessReview body, or None when it is not one.
pub fn self_subject_access_review(body: &[u8]) -> Option<Value> {
    let unknown = body.strip_prefix(b"k8s\0")?;
    let raw = field(unknown, 2)?;
    let spec = field(raw, 2)?;
    let mut out = Map::new();
    if let Some(attrs) = field(spec, 1) {
        let names = [
            "namespace",
            "verb",
            "group",
            "version",
            "resource",
            "subresource",
            "name",
        ];
        let mut ra = Map::new();
        for (n, data) in fields(attrs)? {
            if let Some(name) = usize::try_from(n)
                .ok()
                .and_then(|n| names.get(n.checked_sub(1)?))
            {
                ra.insert(
                    (*name).into(),
                    Value::String(String::from_utf8_lossy(data).into_owned()),
                );
            }
        }
        out.insert("resourceAttributes".into(), Value::Object(ra));
    }
    if let Some(attrs) = field(spec, 2) {
        let mut nra = Map::new();
        for (n, data) in fields(attrs)? {
            let name = match n {
                1 => "path",
                2 => "verb",
                _ => continue,
            };
            nra.insert(
                name.into(),
                Value::String(String::from_utf8_lossy(data).into_owned()),
            );
        }
        out.insert("nonResourceAttributes".into(), Value::Object(nra));
    }
    Some(
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": out}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u8, data: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2, data.len() as u8];
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn reads_kubectl_can_i_bodies() {
        let attrs = [
            field(1, b"work"),
            field(2, b"get"),
            field(3, b"apps"),
            field(5, b"daemonsets"),
            field(7, b"ds1"),
        ]
        .concat();
        let review = [field(1, b""), field(2, &field(1, &attrs))].concat();
        let type_meta = [
            field(1, b"authorization.k8s.io/v1"),
            field(2, b"SelfSubjectAccessReview"),
        ]
        .concat();
        let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &review)].concat();
        let parsed = self_subject_access_review(&body).expect("parses");
        assert_eq!(
            parsed["spec"]["resourceAttributes"],
            json!({"namespace": "work", "verb": "get", "group": "apps", "resource": "daemonsets", "name": "ds1"})
        );
        assert_eq!(self_subject_access_review(b"{}"), None);
        assert_eq!(
            self_subject_access_review(b"k8s\0\x12\x05ab"),
            None,
            "truncated"
        );
    }
}
