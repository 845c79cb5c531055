"""Template filters for the browser pages: `{% load web %}`."""

from django import template

from calculet import labels

register = template.Library()


@register.filter(name="label")
def label_filter(value, kind):
    """`{{ question.state|label:"state" }}`: the translated label of a stored value."""
    return labels.label(kind, value)


@register.filter
def get_item(mapping, key):
    """`{{ counts|get_item:state }}`: a dictionary lookup by a variable key."""
    return mapping.get(key, "") if mapping else ""
