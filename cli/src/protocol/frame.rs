//! JSON-RPC 2.0 framing: one message per line, in and out. Decoding never
//! panics and never guesses: a line that is not exactly a request or a
//! notification becomes the error the specification names for it.

use serde_json::{json, Map, Value};

/// Invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON, but not a request object this server takes.
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The parameters are wrong: `data.field` names the one.
pub const INVALID_PARAMS: i64 = -32602;
/// A request other than `initialize` before `initialize`.
pub const NOT_INITIALIZED: i64 = -32002;
/// The executor refused (disposed, not found, a spawn failure, …):
/// `data.code` says which.
pub const EXECUTOR_ERROR: i64 = -32000;

/// One JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut e = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            e["data"] = data.clone();
        }
        e
    }
}

/// A decoded call: a request (with `id`) or a notification (without).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// A number or a string, echoed in the response; `None`: a
    /// notification, answered by nothing (not even an error).
    pub id: Option<Value>,
    pub method: String,
    /// Always an object: absent `params` is `{}`.
    pub params: Map<String, Value>,
}

/// Decodes one line (without its newline). The error carries the id to
/// answer with: the request's own when it could be read, else `null`; or
/// `None` for a notification, which nothing answers, not even an error
/// (one whose `params` are not an object: its method is known to be
/// wrongly called, as for any other wrong parameter).
pub fn decode(line: &[u8]) -> Result<Call, (Option<Value>, RpcError)> {
    decode_message(line)
        .map_err(|(id, e)| (Some(id), e))?
        .map_err(|e| (None, e))
}

/// [`decode`]: a message that is not a request is answered (`Err`); a
/// notification calling its method wrongly is not (`Ok(Err)`).
fn decode_message(line: &[u8]) -> Result<Result<Call, RpcError>, (Value, RpcError)> {
    // Text that is not quite Unicode (bytes that are not UTF-8, a lone
    // surrogate escape, which Python's json writes for a surrogate-escaped
    // path) is read as the executor reads output: U+FFFD in its place. A
    // parse error could not name the request, which would then wait
    // forever for its answer.
    let text = String::from_utf8_lossy(line);
    let text = without_lone_surrogates(&text);
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| (Value::Null, RpcError::new(PARSE_ERROR, format!("not JSON: {e}"))))?;
    let Value::Object(mut message) = value else {
        let what = if value.is_array() {
            "a batch (an array): send one request per line"
        } else {
            "not an object"
        };
        return Err((
            Value::Null,
            RpcError::new(INVALID_REQUEST, format!("the message is {what}")),
        ));
    };
    let id = match message.remove("id") {
        None => None,
        Some(id @ Value::String(_)) => Some(id),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(Value::Number(n)),
        Some(other) => {
            return Err((
                Value::Null,
                RpcError::new(
                    INVALID_REQUEST,
                    format!("id must be a string or an integer, got {}", type_of(&other)),
                ),
            ))
        }
    };
    let answer = id.clone().unwrap_or(Value::Null);
    let invalid = |msg: String| (answer.clone(), RpcError::new(INVALID_REQUEST, msg));
    match message.remove("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        Some(other) => return Err(invalid(format!("jsonrpc must be \"2.0\", got {other}"))),
        None => return Err(invalid("jsonrpc is required (\"2.0\")".into())),
    }
    let method = match message.remove("method") {
        Some(Value::String(m)) => m,
        Some(other) => {
            return Err(invalid(format!(
                "method must be a string, got {}",
                type_of(&other)
            )))
        }
        None if message.contains_key("result") || message.contains_key("error") => {
            return Err(invalid(
                "this server sends no requests: a response is not expected".into(),
            ))
        }
        None => return Err(invalid("method is required".into())),
    };
    let params = match message.remove("params") {
        None => Map::new(),
        Some(Value::Object(p)) => p,
        Some(other) => {
            let mut e = RpcError::new(
                INVALID_PARAMS,
                format!("params must be an object (by name), got {}", type_of(&other)),
            );
            e.data = Some(json!({ "code": "INVALID_ARGUMENT", "field": "params" }));
            return match id {
                Some(_) => Err((answer, e)),
                None => Ok(Err(e)),
            };
        }
    };
    if let Some(key) = message.keys().next() {
        return Err(invalid(format!("{key} is not a member of a request")));
    }
    Ok(Ok(Call { id, method, params }))
}

/// `text` with each `\uXXXX` escape of a surrogate that has no partner
/// replaced by `\uFFFD`.
fn without_lone_surrogates(text: &str) -> std::borrow::Cow<'_, str> {
    let b = text.as_bytes();
    // The code unit of the escape at `i` (`\uXXXX` starting there).
    let unit = |i: usize| -> Option<u16> {
        if b.get(i) != Some(&b'\\') || b.get(i + 1) != Some(&b'u') {
            return None;
        }
        u16::from_str_radix(text.get(i + 2..i + 6)?, 16).ok()
    };
    let mut out: Option<String> = None;
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit(i) else {
            i += 2; // an escape of another kind (`\\` included): skip both
            continue;
        };
        let high = (0xD800..0xDC00).contains(&u);
        let low = (0xDC00..0xE000).contains(&u);
        if high && unit(i + 6).is_some_and(|n| (0xDC00..0xE000).contains(&n)) {
            i += 12; // a pair
            continue;
        }
        if high || low {
            let o = out.get_or_insert_with(String::new);
            o.push_str(&text[copied..i]);
            o.push_str("\\uFFFD");
            copied = i + 6;
        }
        i += 6;
    }
    match out {
        None => std::borrow::Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(&text[copied..]);
            std::borrow::Cow::Owned(o)
        }
    }
}

/// The JSON type of `v`, for messages.
pub fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub fn response(id: &Value, result: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string()
}

/// The id of the call a message answers (`None` for a notification).
pub fn answered_id(line: &str) -> Option<Value> {
    let message: Value = serde_json::from_str(line).ok()?;
    match message.get("method") {
        Some(_) => None,
        None => message.get("id").filter(|id| !id.is_null()).cloned(),
    }
}

pub fn error_response(id: &Value, error: &RpcError) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() }).to_string()
}

pub fn notification(method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(line: &str) -> i64 {
        decode(line.as_bytes()).unwrap_err().1.code
    }

    #[test]
    fn requests_and_notifications_decode() {
        let c = decode(br#"{"jsonrpc":"2.0","id":7,"method":"list"}"#).unwrap();
        assert_eq!(
            (c.id, c.method.as_str(), c.params.len()),
            (Some(json!(7)), "list", 0)
        );
        let n = decode(br#"{"jsonrpc":"2.0","method":"cancel","params":{"run_id":"a"}}"#).unwrap();
        assert_eq!(n.id, None);
    }

    #[test]
    fn text_that_is_not_quite_unicode_is_read_with_replacement_characters() {
        let command = |line: &[u8]| {
            let c = decode(line).unwrap_or_else(|(_, e)| panic!("{e:?}"));
            c.params["request"]["command"].as_str().unwrap().to_owned()
        };
        let call = |cmd: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":5,"method":"resolve","params":{{"request":{{"command":"{cmd}"}}}}}}"#
            )
        };
        assert_eq!(command(call(r"a\ud800b").as_bytes()), "a\u{fffd}b");
        assert_eq!(command(call(r"a\udc00").as_bytes()), "a\u{fffd}");
        assert_eq!(
            command(call(r"\ud800\ud800\udc00").as_bytes()),
            "\u{fffd}\u{10000}"
        );
        assert_eq!(
            command(call(r"\\ud800").as_bytes()),
            "\\ud800",
            "an escaped backslash is not an escape"
        );
        assert_eq!(command(call(r"\ud83d\ude00").as_bytes()), "\u{1f600}");
        let mut bytes = call("a_b").into_bytes();
        let at = bytes.iter().position(|b| *b == b'_').unwrap();
        bytes[at] = 0xff;
        assert_eq!(command(&bytes), "a\u{fffd}b");
    }

    #[test]
    fn every_malformed_shape_has_its_error() {
        assert_eq!(code_of("{"), PARSE_ERROR);
        assert_eq!(code_of("\u{0}"), PARSE_ERROR);
        assert_eq!(code_of("[]"), INVALID_REQUEST);
        assert_eq!(code_of("3"), INVALID_REQUEST);
        assert_eq!(code_of(r#"{"id":1,"method":"list"}"#), INVALID_REQUEST);
        assert_eq!(
            code_of(r#"{"jsonrpc":"1.0","id":1,"method":"list"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1.5,"method":"list"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":null,"method":"list"}"#),
            INVALID_REQUEST
        );
        assert_eq!(code_of(r#"{"jsonrpc":"2.0","id":1,"method":3}"#), INVALID_REQUEST);
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"method":"list","x":1}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":1,"method":"list","params":[1]}"#),
            INVALID_PARAMS
        );
        // The id is echoed whenever it could be read.
        let (id, _) = decode(br#"{"jsonrpc":"2.0","id":"x","method":3}"#).unwrap_err();
        assert_eq!(id, Some(json!("x")));
        // A notification calling its method wrongly is answered by nothing.
        let (id, e) = decode(br#"{"jsonrpc":"2.0","method":"list","params":[]}"#).unwrap_err();
        assert_eq!((id, e.code), (None, INVALID_PARAMS));
    }
}
