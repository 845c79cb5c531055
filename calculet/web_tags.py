"""Template filters for the browser pages: `{% load web %}`."""

from django import template

from calculet import labels

register = template.Library()


@register.filter(name="label")
def label_filter(value, kind):
    """`{{ question.state|label:"state" }}`: the translated label of a stored value."""
    return labels.label(kind, value)


@register.filter(name="phrase")
def phrase_filter(value, kind):
    """`{{ run.reason|phrase:"run_summary" }}`: a stored English sentence in the active language."""
    return labels.phrase(kind, value or "")


@register.filter
def get_item(mapping, key):
    """`{{ counts|get_item:state }}`: a dictionary lookup by a variable key."""
    return mapping.get(key, "") if mapping else ""


@register.inclusion_tag("char-count.html")
def char_count(field_id: str, value, limit: int):
    """`{% char_count "comment-body" form.body.value 4000 %}`: the characters used of a field's limit, beside the
    field. The server's count stands without JavaScript; static/js/calculet.js keeps it live while typing."""
    return {"field_id": field_id, "used": len(str(value or "")), "limit": limit}
