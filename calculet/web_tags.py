"""Template filters for the browser pages: `{% load web %}`."""

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

from calculet import labels, pagecache, sentences

register = template.Library()


@register.filter(name="label")
def label_filter(value, kind):
    """`{{ question.state|label:"state" }}`: the translated label of a stored value."""
    return labels.label(kind, value)


@register.filter(name="listed")
def listed_filter(items):
    """`{{ view.alternatives|listed }}`: a list inside a sentence, joined as the reader's language lists."""
    return labels.listed(items)


@register.filter(name="phrase")
def phrase_filter(value, kind):
    """`{{ run.reason|phrase:"run_summary" }}`: a stored English sentence in the active language."""
    return labels.phrase(kind, value or "")


@register.filter
def sentence(stored):
    """`{{ reason|sentence }}`: a stored reason in the reader's language (`sentences.reason_text`)."""
    return sentences.reason_text(stored)


INLINE_CODE = re.compile(r"`([^`\n]+)`")


@register.filter
def inline_code(value):
    """`{{ item.conclusion|inline_code }}`: the checklist's `code` spans as <code>, everything else escaped."""
    return mark_safe(INLINE_CODE.sub(r"<code>\1</code>", escape(value or "")))


@register.filter
def get_item(mapping, key):
    """`{{ counts|get_item:state }}`: a dictionary lookup by a variable key."""
    return mapping.get(key, "") if mapping else ""


@register.inclusion_tag("char-count.html")
def char_count(field_id: str, value, limit: int):
    """`{% char_count "comment-body" form.body.value 4000 %}`: the characters used of a field's limit, beside the
    field. The server's count stands without JavaScript; static/js/calculet.js keeps it live while typing."""
    return {"field_id": field_id, "used": len(str(value or "")), "limit": limit}


@register.tag
def cached_part(parser, token):
    """`{% cached_part "dashboard-sections" data_version today %}…{% endcached_part %}`: the enclosed part,
    rendered once per data version (see calculet.pagecache) and per value of the names after it. A view that
    caches a part reads `data_version` first and hands what the part shows as lazy objects, so a part served
    from the cache costs no query."""
    bits = token.split_contents()
    if len(bits) < 3:
        raise template.TemplateSyntaxError(f"{bits[0]} takes a part name, the data version and what else it varies on.")
    nodelist = parser.parse(("endcached_part",))
    parser.delete_first_token()
    return CachedPartNode(nodelist, parser.compile_filter(bits[1]), [parser.compile_filter(bit) for bit in bits[2:]])


class CachedPartNode(template.Node):
    def __init__(self, nodelist, name, keys):
        self.nodelist, self.name, self.keys = nodelist, name, keys

    def render(self, context):
        version, *vary = (key.resolve(context) for key in self.keys)
        return pagecache.cached_part(self.name.resolve(context), version, vary, lambda: self.nodelist.render(context))
