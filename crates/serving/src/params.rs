//! Query parameters, one shape for every route: a typed struct per route,
//! parsed by serde and described by `utoipa::IntoParams`, so the struct is
//! at once the parser, the OpenAPI parameter list and (through `schemars`,
//! where a tool takes the same arguments) the MCP tool's schema.
//!
//! One policy for a parameter a route does not know, on every route: it is
//! ignored, and named in the answer's `x-ballista-ignored-params` header
//! (and on the jobs page). Upstream's routes ignore parameters they do not
//! know, so an older client's extra `?foo=1` keeps working; naming them
//! shows a misspelt filter rather than a silently wrong list. A known
//! parameter with a bad value is a 400 that names the parameter, quotes
//! the value, and says what the parameter takes.
//!
//! The query string is decoded by `form_urlencoded` (the `url` crate's)
//! and deserialized by `serde_html_form`, a maintained fork of
//! `serde_urlencoded` that reads `foo=` as `None` for an optional number;
//! `serde_path_to_error` names the field a value failed in. A parameter
//! given twice that takes one value is refused rather than one copy
//! silently winning.

use crate::error::ApiError;
use axum::extract::FromRequestParts;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::request::Parts;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use url::form_urlencoded;
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterIn};

/// Header naming the parameters a route ignored because it does not know
/// them (an old client's, or a misspelt one).
pub const IGNORED_PARAMS_HEADER: &str = "x-ballista-ignored-params";

/// A route's query parameters, parsed: `value`, and the names given that
/// the route does not know (ignored, once each, in the order given).
#[derive(Debug)]
pub struct Params<T> {
    /// The parameters the route takes.
    pub value: T,
    /// Parameters given that the route does not take.
    pub ignored: Vec<String>,
}

/// The parameters `T` describes, as OpenAPI lists them.
pub fn described<T: IntoParams>() -> Vec<Parameter> {
    T::into_params(|| Some(ParameterIn::Query))
}

/// What parameter `name` of `T` takes, as its description says.
pub fn about<T: IntoParams>(name: &str) -> Option<String> {
    described::<T>()
        .into_iter()
        .find(|p| p.name == name)
        .and_then(|p| p.description)
}

impl<T: DeserializeOwned + IntoParams> Params<T> {
    /// Parses a raw query string (without the `?`).
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        let known = described::<T>();
        let known = |key: &str| known.iter().any(|p| p.name == key);
        let pairs: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
            .into_owned()
            .collect();
        let mut kept = form_urlencoded::Serializer::new(String::new());
        let mut ignored: Vec<String> = Vec::new();
        for (key, value) in &pairs {
            if known(key) {
                kept.append_pair(key, value);
            } else if !ignored.contains(key) {
                ignored.push(key.clone());
            }
        }
        let kept = kept.finish();
        let de = serde_html_form::Deserializer::new(form_urlencoded::parse(kept.as_bytes()));
        match serde_path_to_error::deserialize(de) {
            Ok(value) => Ok(Params { value, ignored }),
            Err(e) => Err(refusal::<T>(&pairs, e)),
        }
    }
}

/// The 400 for a value `T` does not take: which parameter, which value,
/// and what the parameter takes.
fn refusal<T: IntoParams>(
    pairs: &[(String, String)],
    e: serde_path_to_error::Error<serde_html_form::de::Error>,
) -> ApiError {
    let path = e.path().to_string();
    let name = path.split(['[', '.']).next().unwrap_or_default();
    let inner = e.into_inner().to_string();
    if name.is_empty() || name == "?" {
        // Not a field's value: a required parameter is missing.
        let missing = inner
            .strip_prefix("missing field ")
            .map(|field| field.trim_matches('`'));
        return ApiError::BadRequest(match missing {
            Some(field) => match about::<T>(field) {
                Some(takes) => format!("missing parameter `{field}`: {takes}"),
                None => format!("missing parameter `{field}`"),
            },
            None => format!("invalid parameters: {inner}"),
        });
    }
    let given: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect();
    let takes = about::<T>(name).unwrap_or_default();
    ApiError::BadRequest(match given.as_slice() {
        [one] => format!("invalid value {one:?} for parameter `{name}` ({inner}): {takes}"),
        many => format!(
            "parameter `{name}` given {} times; it takes one value: {takes}",
            many.len()
        ),
    })
}

/// A value checked after parsing: unless `ok`, the 400 naming `name`,
/// quoting `value` and saying what the parameter `takes`.
pub fn check(
    name: &str,
    value: impl std::fmt::Debug,
    ok: bool,
    takes: &str,
) -> Result<(), ApiError> {
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "invalid value {value:?} for parameter `{name}`: expected {takes}"
        )))
    }
}

impl<S, T> FromRequestParts<S> for Params<T>
where
    S: Send + Sync,
    T: DeserializeOwned + IntoParams + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let parsed = Self::parse(parts.uri.query().unwrap_or_default())?;
        if !parsed.ignored.is_empty()
            && let Some(slot) = parts.extensions.get::<IgnoredSlot>()
        {
            let mut names = slot.0.lock();
            for name in &parsed.ignored {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
        Ok(parsed)
    }
}

/// Where [`Params`] leaves the ignored names for [`name_ignored`].
#[derive(Clone, Default)]
struct IgnoredSlot(Arc<Mutex<Vec<String>>>);

/// Middleware: names in [`IGNORED_PARAMS_HEADER`] the parameters the
/// route's [`Params`] ignored.
pub async fn name_ignored(mut request: Request, next: Next) -> Response {
    let slot = IgnoredSlot::default();
    request.extensions_mut().insert(slot.clone());
    let mut response = next.run(request).await;
    let names = std::mem::take(&mut *slot.0.lock());
    if !names.is_empty()
        && let Ok(value) = http::HeaderValue::from_str(&names.join(","))
    {
        response.headers_mut().insert(IGNORED_PARAMS_HEADER, value);
    }
    response
}

/// A route that takes no parameters.
#[derive(Debug, Default, serde::Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NoParams {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of something.
    #[derive(Debug, serde::Deserialize, IntoParams)]
    #[into_params(parameter_in = Query)]
    struct Paged {
        /// Rows per page.
        limit: Option<usize>,
        /// A name.
        #[serde(default)]
        name: Option<String>,
    }

    /// Two runs.
    #[derive(Debug, serde::Deserialize, IntoParams)]
    #[into_params(parameter_in = Query)]
    struct Two {
        /// The first run.
        a: String,
    }

    fn error(e: ApiError) -> String {
        match e {
            ApiError::BadRequest(m) => m,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn unknown_names_are_ignored_and_named_once_each_in_order() {
        let p = Params::<Paged>::parse("limt=5&limit=2&foo=1&limt=6").unwrap();
        assert_eq!(p.ignored, ["limt", "foo"]);
        assert_eq!(p.value.limit, Some(2));
        // Decoded as a browser encodes a form.
        let p = Params::<Paged>::parse("name=a+b%26c&x%20y=1").unwrap();
        assert_eq!(p.value.name.as_deref(), Some("a b&c"));
        assert_eq!(p.ignored, ["x y"]);
    }

    #[test]
    fn a_bad_value_names_its_parameter_value_and_what_it_takes() {
        let e = error(Params::<Paged>::parse("limit=x").unwrap_err());
        assert!(
            e.starts_with("invalid value \"x\" for parameter `limit`"),
            "{e}"
        );
        assert!(e.ends_with("Rows per page."), "{e}");
        let e = error(Params::<Paged>::parse("limit=1&limit=2").unwrap_err());
        assert!(e.contains("`limit` given 2 times"), "{e}");
        let e = error(Params::<Two>::parse("b=1").unwrap_err());
        assert_eq!(e, "missing parameter `a`: The first run.");
        assert_eq!(Params::<Two>::parse("a=x").unwrap().value.a, "x");
        // An empty number is no number.
        assert_eq!(Params::<Paged>::parse("limit=").unwrap().value.limit, None);
    }

    #[test]
    fn the_description_lists_each_field() {
        let names: Vec<String> = described::<Paged>().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["limit", "name"]);
        assert!(described::<NoParams>().is_empty());
    }
}
