"""What every page's top bar shows of the signed-in user."""

from calculet import labels
from vendor.access import user_role


def membership(request) -> dict:
    role = user_role(request.user)
    return {"web_role": role, "web_role_label": labels.label("role", role)}
