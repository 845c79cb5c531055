"""The API's query parameters, as strict as its bodies: a parameter the operation does not declare, one given
twice, or a value its declaration does not allow is a 400 naming it, never read as "no filter" or "the
default". Each consumer here declares in the schema exactly what it accepts.

Its own module, not calculet.api: DRF imports the default filter backends while its generic views load."""

import re
from decimal import Decimal

from django import forms
from django.utils.translation import gettext, gettext_noop
from django_filters import BooleanFilter, CharFilter, ModelChoiceFilter, NumberFilter
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.filters import OrderingFilter
from rest_framework.mixins import ListModelMixin
from rest_framework.pagination import PageNumberPagination

BOOLEAN_VALUES = ("true", "false")
ID_MAX = 2**63 - 1  # PostgreSQL's bigint
# Templates, translated when a request is refused: the client's Accept-Language picks the language.
UNKNOWN_PARAMETER = gettext_noop("Unknown query parameter.")
REPEATED_PARAMETER = gettext_noop("Given more than once.")
# Digits, or a decimal or exponent notation (exponents up to 99, past every bound here) whose value may be whole.
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]{1,2})?$")
# What a text filter's schema allows: Django's form fields refuse a NUL character, PostgreSQL could not store it.
TEXT_PATTERN = "^[^\\x00]*$"


def _refuse(name: str, template: str, **params):
    """A 400 naming the parameter, its sentence from a marked template in the client's language."""
    raise serializers.ValidationError({name: [gettext(template) % params]})


def _read_once(request, key: str, read):
    """What `read()` gives for this request, read once: `check_query_parameters`, before the view, and the
    view's own pagination, filters and ordering take the same reading. A refusal is raised, never kept: it
    ends the request with its 400."""
    readings = vars(request).setdefault("_query_readings", {})
    if key not in readings:
        readings[key] = read()
    return readings[key]


def whole_number(raw: str) -> int | None:
    """The text as a whole number, None when it is none. The schema's integer is a value, not a spelling: a
    client may write a large one as `2.3e+16` (as JSON does) or `5.0`; `0.5`, `-1` and `1e999` are refused."""
    if not _NUMBER.match(raw):
        return None
    value = Decimal(raw)
    return int(value) if value == value.to_integral_value() else None


def query_integer(request, name: str, maximum: int | None = None) -> int | None:
    """The parameter as a whole number from 1 to `maximum`, or None when it is not given."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    value = whole_number(raw)
    if value is None or value < 1 or (maximum is not None and value > maximum):
        if maximum is None:
            _refuse(name, gettext_noop("A whole number from 1."))
        _refuse(name, gettext_noop("A whole number from 1 to %(maximum)s."), maximum=maximum)
    return value


class Pagination(PageNumberPagination):
    """Pages by number; a page or page size that is not a whole number in range is refused, not replaced by
    the default."""

    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        size = _read_once(
            request,
            self.page_size_query_param,
            lambda: query_integer(request, self.page_size_query_param, maximum=self.max_page_size),
        )
        return self.page_size if size is None else size

    def get_page_number(self, request, paginator):
        number = _read_once(request, self.page_query_param, lambda: query_integer(request, self.page_query_param))
        return 1 if number is None else number

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"]["maximum"] = self.max_page_size
        return parameters


def _ordering_terms(view) -> list[str]:
    return list(getattr(view, "ordering_fields", None) or [])


class StrictOrderingFilter(OrderingFilter):
    """`ordering` names only the view's `ordering_fields` (comma-separated, each optionally with `-`); a view
    without them takes no `ordering` at all."""

    def get_ordering(self, request, queryset, view):
        return _read_once(request, self.ordering_param, lambda: self._ordering(request, queryset, view))

    def _ordering(self, request, queryset, view):
        if request.query_params.get(self.ordering_param) == "":  # DRF's own reads it as "the default"
            _refuse(self.ordering_param, gettext_noop("Name a field to order by."))
        return super().get_ordering(request, queryset, view)

    def remove_invalid_fields(self, queryset, fields, view, request):
        allowed = _ordering_terms(view)
        wrong = [term for term in fields if term.removeprefix("-") not in allowed]
        if wrong:
            _refuse(
                self.ordering_param,
                gettext_noop(
                    "Cannot order by %(wrong)s; one or more of %(allowed)s, each optionally with '-', "
                    "separated by commas."
                ),
                wrong=", ".join(repr(term) for term in wrong),
                allowed=", ".join(allowed),
            )
        return list(fields)

    def get_schema_operation_parameters(self, view):
        terms = _ordering_terms(view)
        if not terms:
            return []
        term = "-?(" + "|".join(re.escape(name) for name in terms) + ")"
        return [
            {
                "name": self.ordering_param,
                "required": False,
                "in": "query",
                "description": f"One or more of {', '.join(terms)}, comma-separated; '-' before one reverses it.",
                "schema": {"type": "string", "pattern": f"^{term}(,{term})*$"},
            }
        ]


class WholeNumberField(forms.IntegerField):
    """Django's IntegerField, reading the number as `whole_number` does (its own refuses `2.3e+16`)."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        number = whole_number(str(value))
        if number is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return number


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": ID_MAX})
class IdFilter(NumberFilter):
    """An object's id: a whole number, as the schema says (NumberFilter's own takes 0.5), that a database id
    can be (a larger one would fail in the query)."""

    field_class = WholeNumberField

    def __init__(self, *args, **kwargs):
        super().__init__(*args, min_value=0, max_value=ID_MAX, **kwargs)


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter's backend, except that a boolean filter takes only `true` or `false` and a choice filter
    no empty value (its own reads either as "no filter"), and every filter's error is reported at once. The
    values are checked once per request (`validated_filterset`), and the checked filters applied to the
    queryset the view scoped."""

    def filter_queryset(self, request, queryset, view):
        filterset = self.validated_filterset(request, view)
        return queryset if filterset is None else filterset.filter_queryset(queryset)

    def validated_filterset(self, request, view):
        """The view's filterset over the request's parameters, its values checked; a 400 naming every wrong one."""

        def read():
            filterset = self.get_filterset(request, view.queryset, view)
            errors = {} if filterset is None else filter_value_errors(filterset, request)
            if errors:
                raise serializers.ValidationError(errors)
            return filterset

        return _read_once(request, "filters", read)


def filter_value_errors(filterset, request) -> dict[str, list[str]]:
    """What is wrong with the values given to the filterset's filters, by parameter."""
    errors = {}
    for name, item in filterset.filters.items():
        value = request.query_params.get(name)
        if value is None:
            continue
        if isinstance(item, BooleanFilter) and value not in BOOLEAN_VALUES:
            errors[name] = [gettext("Either true or false.")]
        # Its own reads an empty value as "no filter". A text's or a model choice's schema allows it;
        # a choice's enum, a number's or a date's format do not.
        elif value == "" and not isinstance(item, CharFilter | ModelChoiceFilter):
            errors[name] = [gettext("Give a value, or leave the parameter out.")]
    if not filterset.is_valid():
        errors = {**{name: list(messages) for name, messages in filterset.errors.items()}, **errors}
    return errors


def _filter_names(view) -> set[str]:
    filterset_class = getattr(view, "filterset_class", None)
    if filterset_class is not None:
        return set(filterset_class.base_filters)
    return set(getattr(view, "filterset_fields", None) or [])


def query_parameter_names(view, method: str) -> set[str]:
    """The query parameters an operation reads: its own (`view.query_parameters`) and, for a list, its
    pagination, filters and ordering. The schema declares the same set (tests/api/test_query_parameters.py)."""
    names = set(getattr(view, "query_parameters", ()))
    if method in ("GET", "HEAD") and isinstance(view, ListModelMixin):
        if view.pagination_class is not None:
            paginator = view.pagination_class()
            names |= {paginator.page_query_param, paginator.page_size_query_param}
        backends = view.filter_backends
        if any(issubclass(backend, DjangoFilterBackend) for backend in backends):
            names |= _filter_names(view)
        if any(issubclass(backend, OrderingFilter) for backend in backends) and _ordering_terms(view):
            names.add(OrderingFilter.ordering_param)
    return names


def _value_errors(view, request) -> dict[str, list[str]]:
    """What a list's pagination, filters and ordering find wrong in the values given, by parameter: their own
    readings, made first so that one response names every wrong parameter (and kept for when they run)."""
    if request.method not in ("GET", "HEAD") or not isinstance(view, ListModelMixin):
        return {}
    checks = []
    if view.pagination_class is not None:
        paginator = view.pagination_class()
        checks.append(lambda: paginator.get_page_size(request))
        checks.append(lambda: paginator.get_page_number(request, None))
    for backend in view.filter_backends:
        if issubclass(backend, StrictFilterBackend):
            checks.append(lambda backend=backend: backend().validated_filterset(request, view))
        elif issubclass(backend, StrictOrderingFilter):
            checks.append(lambda backend=backend: backend().get_ordering(request, view.queryset, view))
    found: dict[str, list[str]] = {}
    for check in checks:
        try:
            check()
        except serializers.ValidationError as error:
            found.update({name: [str(message) for message in messages] for name, messages in error.detail.items()})
    return found


def check_query_parameters(view, request) -> None:
    """Refuses, all at once and in the order given, every query parameter the operation does not read, every
    one given twice and every value its pagination, filters or ordering do not take. A method the view does
    not take is left to its 405."""
    method = request.method.lower()
    if method not in view.http_method_names or not hasattr(view, method):
        return
    known = query_parameter_names(view, request.method)
    errors = {}
    for name, values in request.query_params.lists():
        if name not in known:
            errors[name] = [gettext(UNKNOWN_PARAMETER)]
        elif len(values) > 1:
            errors[name] = [gettext(REPEATED_PARAMETER)]
    errors |= {name: messages for name, messages in _value_errors(view, request).items() if name not in errors}
    order = list(request.query_params)
    errors = dict(sorted(errors.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))
    if errors:
        raise serializers.ValidationError(errors)
