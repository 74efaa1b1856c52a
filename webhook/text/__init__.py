"""Text helpers below every capability package: quoting values and naming JSON types in messages
(:mod:`~webhook.text.messages`) and the YAML text loader that keeps timestamps as text and reports
YAML errors by line (:mod:`~webhook.text.yamltext`). Pure."""
