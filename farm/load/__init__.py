"""Reading a farm root's configuration: ``_defaults.yml`` (:mod:`farm.load.defaults`) and
``packages/<name>.yml`` (:mod:`farm.load.recipes`, whose :func:`~farm.load.recipes.load_config`
reads both) into the frozen types of :mod:`farm.model.config`, and the publish targets into
their kinds' settings (:mod:`farm.publish.targets`). It sits below every stage whose settings it
parses; the commands call it."""
