"""Optional examples and offline fixtures, not the library's core: the arithmetic tasks (`arithmetic`), the tiny
offline model (`tiny`), the packaged real model (`models`), the tiny model's warm start (`warm_start`), a tool and
environment example (`agents`), the names a recipe reaches them by (`offline`), and the data the demo and the
hard-set benchmark read (`resources/`)."""

import os


RESOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources")
