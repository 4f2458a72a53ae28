//! Template rendering with minijinja in a sandbox: bounded CPU (fuel), a recursion limit,
//! strict undefined variables (a missing one is a 422 naming it), and HTML escaping of values
//! in `html_body` (rendered under a `.html` name, which turns auto-escaping on).
//!
//! The rule for values in the request: a part (subject, body, html_body) the template defines
//! comes from the template, whatever the request says (the spec makes `body` required, so a
//! client that follows it sends one next to `template_id`); a part the template leaves out may
//! be given in the request and is used as it is, not rendered.

use std::collections::BTreeSet;

use herald_common::FieldError;
use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};

use super::InvalidFields;
use crate::store::TemplateRecord;

/// Fuel for one render: enough for any notification, not for a runaway loop.
const FUEL: u64 = 50_000;

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(32);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env
}

/// The name each part renders under; `.html` switches auto-escaping on.
fn part_name(field: &str) -> &'static str {
    match field {
        "html_body" => "html_body.html",
        "subject" => "subject.txt",
        _ => "body.txt",
    }
}

/// Checks that each part of a template compiles (for create and replace).
pub fn check_syntax(parts: &[(&str, Option<&str>)]) -> Result<(), InvalidFields> {
    let env = environment();
    let errors: Vec<FieldError> = parts
        .iter()
        .filter_map(|(field, source)| {
            let source = (*source)?;
            env.template_from_named_str(part_name(field), source)
                .err()
                .map(|e| FieldError::new(*field, format!("is not a valid template: {}", describe(&e))))
        })
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(InvalidFields(errors)) }
}

fn describe(error: &minijinja::Error) -> String {
    let mut text = error.detail().map(str::to_owned).unwrap_or_else(|| error.kind().to_string());
    if let Some(line) = error.line() {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// The rendered parts (each `None` when neither the template nor the request has it).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    pub subject: Option<String>,
    pub body: Option<String>,
    pub html_body: Option<String>,
}

/// Renders `template` with `data`, merged with the parts the request gives.
pub fn render(
    template: &TemplateRecord,
    data: &Map<String, Value>,
    request: Rendered,
) -> Result<Rendered, InvalidFields> {
    let env = environment();
    let parts = [
        ("subject", template.subject.as_deref(), request.subject),
        ("body", template.body.as_deref(), request.body),
        ("html_body", template.html_body.as_deref(), request.html_body),
    ];
    let mut missing = BTreeSet::new();
    let mut compiled = Vec::new();
    for (field, source, given) in parts {
        match (source, given) {
            // The template's part wins; the request's is only the fallback.
            (Some(source), _) => {
                let tmpl = env.template_from_named_str(part_name(field), source).map_err(|e| {
                    InvalidFields::field(
                        "template_id",
                        format!("the template's {field} does not compile: {}", describe(&e)),
                    )
                })?;
                missing.extend(
                    tmpl.undeclared_variables(false).into_iter().filter(|name| !data.contains_key(name)),
                );
                compiled.push((field, Some(tmpl), None));
            }
            (None, given) => compiled.push((field, None, given)),
        }
    }
    if !missing.is_empty() {
        let names = missing.into_iter().collect::<Vec<_>>().join(", ");
        return Err(InvalidFields::field(
            "template_data",
            format!("is missing variables the template uses: {names}"),
        ));
    }
    let mut out = Rendered::default();
    for (field, tmpl, given) in compiled {
        let text = match tmpl {
            Some(tmpl) => Some(tmpl.render(minijinja::value::Serde(data)).map_err(|e| {
                InvalidFields::field(
                    "template_data",
                    format!("cannot render the template's {field}: {}", describe(&e)),
                )
            })?),
            None => given,
        };
        match field {
            "subject" => out.subject = text,
            "body" => out.body = text,
            _ => out.html_body = text,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn template(subject: Option<&str>, body: Option<&str>, html: Option<&str>) -> TemplateRecord {
        TemplateRecord {
            id: herald_common::ids::TemplateId::new(),
            tenant_id: herald_common::ids::TenantId::new(),
            name: "t".into(),
            subject: subject.map(Into::into),
            body: body.map(Into::into),
            html_body: html.map(Into::into),
            created_at: 0,
            updated_at: 0,
        }
    }

    fn data(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn renders_and_escapes_html_only() {
        let t = template(Some("Hi {{ name }}"), Some("Code: {{ code }}"), Some("<p>{{ name }}</p>"));
        let out =
            render(&t, &data(json!({"name": "<b>Ann</b>", "code": "1 < 2"})), Rendered::default()).unwrap();
        assert_eq!(out.subject.as_deref(), Some("Hi <b>Ann</b>"));
        assert_eq!(out.body.as_deref(), Some("Code: 1 < 2"));
        assert_eq!(out.html_body.as_deref(), Some("<p>&lt;b&gt;Ann&lt;&#x2f;b&gt;</p>"));
    }

    #[test]
    fn missing_variables_are_named() {
        let t = template(Some("{{ a }}"), Some("{{ b }} {{ c.d }}"), None);
        let err = render(&t, &data(json!({"a": 1})), Rendered::default()).unwrap_err();
        assert_eq!(err.0[0].field, "template_data");
        assert!(err.0[0].message.ends_with("b, c"), "{}", err.0[0].message);
    }

    #[test]
    fn the_template_wins_and_the_request_is_the_fallback() {
        let t = template(Some("S {{ n }}"), Some("B {{ n }}"), None);
        let request = Rendered {
            subject: Some("mine".into()),
            body: Some("my body".into()),
            html_body: Some("<p>{{ n }}</p>".into()),
        };
        let out = render(&t, &data(json!({"n": 1})), request).unwrap();
        assert_eq!(out.subject.as_deref(), Some("S 1"), "the template's subject wins");
        assert_eq!(out.body.as_deref(), Some("B 1"), "the template's body wins");
        assert_eq!(
            out.html_body.as_deref(),
            Some("<p>{{ n }}</p>"),
            "a part the template lacks comes from the request, not rendered"
        );
    }

    #[test]
    fn runaway_templates_run_out_of_fuel() {
        let t = template(
            None,
            Some("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"),
            None,
        );
        let err = render(&t, &Map::new(), Rendered::default()).unwrap_err();
        assert_eq!(err.0[0].field, "template_data");
    }

    #[test]
    fn syntax_errors_name_the_part() {
        let err = check_syntax(&[("subject", Some("ok")), ("body", Some("{% if %}"))]).unwrap_err();
        assert_eq!(err.0[0].field, "body");
    }
}
