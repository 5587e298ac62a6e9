# The dashboard in a container: `docker build -t vllm-capacity-planner . && docker run -p 8501:8501 \
#     -e VLLM_PLANNER_ALLOWED_HOSTS=vllm.internal:8000 vllm-capacity-planner`
# A container is a shared deployment: it starts closed and contacts only the servers the allow-list names
# (README, "Deploying the dashboard for others"); local model folders are off unless VLLM_PLANNER_MODELS_DIR is set.
FROM python:3.11-slim

# NOTE: visitors see an error's sentence, never a traceback (which names files and values); `make dashboard` keeps
# Streamlit's full details for development.
ENV VLLM_PLANNER_DEPLOYMENT=shared \
    STREAMLIT_CLIENT_SHOW_ERROR_DETAILS=none \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 planner
WORKDIR /app

COPY pyproject.toml README.md ./
COPY requirements/app.lock ./requirements/app.lock
COPY calculator ./calculator
RUN pip install -c requirements/app.lock '.[app]'

COPY app.py ./
COPY pages ./pages
COPY .streamlit ./.streamlit
RUN chown -R planner:planner /app

USER planner
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).status == 200 else 1)"
# `streamlit run app.py`, with the imports warm before the first visitor (pages/common/launch.py).
CMD ["python", "-m", "pages.common.launch", "--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true"]
